"""tools/harness/s3fault.py in front of a real moto_server, driven through boto3 with retries off
(each fault is seen by the client): without faults it is transparent (bytes, ETags, chunked bodies,
SigV4 signatures still verifying upstream); each fault does what it says, to the requests it says
(methods, count, a rate drawn from --seed), and its counter says how often it did."""
import http.client
import os
import threading
import time
import urllib.error

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from conftest import Proxy, s3_client

BUCKET = "s3fault-test"


@pytest.fixture(scope="module")
def data(moto):
    """Objects on the server: 'big' (3 MiB + 5 bytes of random bytes) and 'small'."""
    s3 = s3_client(moto.endpoint)
    s3.create_bucket(Bucket=BUCKET)
    big = os.urandom(3 * 1024 * 1024 + 5)
    s3.put_object(Bucket=BUCKET, Key="big", Body=big)
    s3.put_object(Bucket=BUCKET, Key="small", Body=b"small object")
    return {"big": big, "small": b"small object"}


def code(excinfo):
    e = excinfo.value
    return e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"]


def test_without_faults_it_is_transparent(proxy, moto, data):
    s3, direct = s3_client(proxy.endpoint), s3_client(moto.endpoint)
    body = os.urandom(5 * 1024 * 1024 + 3)
    s3.put_object(Bucket=BUCKET, Key="through", Body=body)
    assert direct.get_object(Bucket=BUCKET, Key="through")["Body"].read() == body
    got = s3.get_object(Bucket=BUCKET, Key="big")
    assert got["Body"].read() == data["big"]
    assert got["ETag"] == direct.head_object(Bucket=BUCKET, Key="big")["ETag"]
    assert s3.head_object(Bucket=BUCKET, Key="big")["ContentLength"] == len(data["big"])
    assert {"big", "small", "through"} <= {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    s3.delete_object(Bucket=BUCKET, Key="through")
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=BUCKET, Key="through")
    assert code(e)[0] == 404
    c = proxy.counters()
    assert c["requests"] == c["forwarded"] == 6
    assert sum(c[k] for k in ("slowdown", "error500", "delayed", "hung", "truncated", "corrupted", "dropped",
                              "upstream_errors")) == 0
    assert proxy.stats()["methods"] == {"PUT": 1, "GET": 2, "HEAD": 2, "DELETE": 1}


def test_a_chunked_request_body_goes_through_with_its_framing(proxy, moto, data):
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    c.putrequest("PUT", f"/{BUCKET}/chunked", skip_accept_encoding=True)
    c.putheader("Transfer-Encoding", "chunked")
    c.putheader("Authorization", "AWS4-HMAC-SHA256 Credential=kvstream-test/20260101/us-east-1/s3/aws4_request, "
                                 "SignedHeaders=host, Signature=00")
    c.putheader("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
    c.putheader("x-amz-date", "20260101T000000Z")
    c.endheaders()
    parts = [b"one ", os.urandom(300 * 1024), b" three"]
    for part in parts:
        c.send(b"%x\r\n%s\r\n" % (len(part), part))
    c.send(b"0\r\n\r\n")
    r = c.getresponse()
    r.read()
    assert r.status == 200
    assert s3_client(moto.endpoint).get_object(Bucket=BUCKET, Key="chunked")["Body"].read() == b"".join(parts)


def test_slowdown_answers_503_slowdown_until_cleared(proxy, data):
    s3 = s3_client(proxy.endpoint)
    proxy.control("slowdown/1")
    for _ in range(5):
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket=BUCKET, Key="small")
        assert code(e) == (503, "SlowDown")
        assert e.value.response["Error"]["Message"] == "Please reduce your request rate."
    c = proxy.counters()
    assert (c["slowdown"], c["forwarded"]) == (5, 0)
    assert proxy.control("clear")["faults"] == {}
    assert s3.get_object(Bucket=BUCKET, Key="small")["Body"].read() == data["small"]
    assert proxy.counters()["forwarded"] == 1


def test_a_rate_is_a_fraction_drawn_from_the_seed(workdir, moto, data):
    patterns = []
    for _ in range(2):
        p = Proxy(workdir, moto.endpoint, "--seed", "5")
        try:
            s3 = s3_client(p.endpoint)
            p.control("slowdown/0.3")
            pattern = []
            for _ in range(60):
                try:
                    s3.head_object(Bucket=BUCKET, Key="small")
                    pattern.append(0)
                except ClientError as e:
                    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 503
                    pattern.append(1)
            c = p.counters()
            assert c["slowdown"] == sum(pattern) and c["forwarded"] == 60 - sum(pattern)
            patterns.append(pattern)
        finally:
            p.stop()
    assert 6 <= sum(patterns[0]) <= 36, patterns[0]
    assert patterns[0] == patterns[1]  # the same seed, the same requests refused


def test_error500_to_the_methods_and_count_it_was_given(proxy, moto, data):
    s3 = s3_client(proxy.endpoint)
    proxy.control("error500/1?methods=PUT&count=2")
    body = os.urandom(2 * 1024 * 1024)  # big enough for botocore's Expect: 100-continue
    assert s3.get_object(Bucket=BUCKET, Key="small")["Body"].read() == data["small"]
    for i in range(2):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=BUCKET, Key=f"refused{i}", Body=body)
        assert code(e) == (500, "InternalError")
    assert proxy.stats()["faults"] == {}  # its count used up
    s3.put_object(Bucket=BUCKET, Key="accepted", Body=body)
    direct = s3_client(moto.endpoint)
    assert direct.get_object(Bucket=BUCKET, Key="accepted")["Body"].read() == body
    with pytest.raises(ClientError) as e:
        direct.head_object(Bucket=BUCKET, Key="refused0")
    assert code(e)[0] == 404  # never reached the server
    c = proxy.counters()
    assert (c["error500"], c["forwarded"]) == (2, 2)


def test_delay_holds_each_request(proxy, data):
    s3 = s3_client(proxy.endpoint)
    s3.head_object(Bucket=BUCKET, Key="small")  # the connection made
    proxy.control("delay/0.5?count=1")
    start = time.monotonic()
    s3.head_object(Bucket=BUCKET, Key="small")
    held = time.monotonic() - start
    start = time.monotonic()
    s3.head_object(Bucket=BUCKET, Key="small")
    after = time.monotonic() - start
    assert held >= 0.5 and after < 0.4, (held, after)
    assert proxy.counters()["delayed"] == 1


def test_hang_holds_requests_unanswered_until_cleared(proxy, data):
    proxy.control("hang?methods=GET")
    with pytest.raises(ReadTimeoutError):
        s3_client(proxy.endpoint, read_timeout=1).get_object(Bucket=BUCKET, Key="small")
    done = {}

    def get():
        done["body"] = s3_client(proxy.endpoint, read_timeout=30).get_object(Bucket=BUCKET, Key="big")["Body"].read()

    t = threading.Thread(target=get)
    t.start()
    for _ in range(100):
        if proxy.counters()["hanging"] == 2:
            break
        time.sleep(0.05)
    assert proxy.counters()["hanging"] == 2
    s3_client(proxy.endpoint).head_object(Bucket=BUCKET, Key="small")  # HEAD is not held
    time.sleep(0.5)
    assert t.is_alive() and "body" not in done
    proxy.control("clear")
    t.join(10)
    assert done["body"] == data["big"]  # the held request went on once cleared
    c = proxy.counters()
    assert (c["hung"], c["hanging"]) == (2, 0)


def test_truncate_sends_half_the_body_then_closes(proxy, data):
    proxy.control("truncate/1?count=1")
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    c.request("GET", f"/{BUCKET}/big", headers={
        "Authorization": "AWS4-HMAC-SHA256 Credential=kvstream-test/20260101/us-east-1/s3/aws4_request, "
                         "SignedHeaders=host, Signature=00", "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
        "x-amz-date": "20260101T000000Z"})
    r = c.getresponse()
    assert r.status == 200 and int(r.getheader("Content-Length")) == len(data["big"])
    with pytest.raises(http.client.IncompleteRead) as e:
        r.read()
    assert e.value.partial == data["big"][:len(data["big"]) // 2]
    proxy.control("truncate/1?count=1")
    s3 = s3_client(proxy.endpoint)
    with pytest.raises(Exception) as e:  # botocore: IncompleteReadError or a ResponseStreamingError
        s3.get_object(Bucket=BUCKET, Key="big")["Body"].read()
    assert "IncompleteRead" in type(e.value).__name__ or "Streaming" in type(e.value).__name__, repr(e.value)
    assert s3.get_object(Bucket=BUCKET, Key="big")["Body"].read() == data["big"]
    assert proxy.counters()["truncated"] == 2


def test_corrupt_flips_one_byte_of_a_get_body(proxy, data):
    proxy.control("corrupt/1?count=1")
    # Checksums off: the bytes as they came.
    s3 = s3_client(proxy.endpoint, response_checksum_validation="when_required")
    got = s3.get_object(Bucket=BUCKET, Key="big")["Body"].read()
    offset = proxy.stats()["last_corrupt"]["offset"]
    diff = [i for i in range(len(got)) if got[i] != data["big"][i]]
    assert len(got) == len(data["big"]) and diff == [offset]
    assert got[offset] == data["big"][offset] ^ 0xFF
    # boto3's default (the CRC32 it stored on upload, asked back) notices.
    proxy.control("corrupt/1?count=1")
    with pytest.raises(Exception) as e:
        s3_client(proxy.endpoint).get_object(Bucket=BUCKET, Key="big")["Body"].read()
    assert type(e.value).__name__ == "FlexibleChecksumError"
    # HEAD and PUT are not corrupted; a rule without a GET left untouched.
    proxy.control("corrupt/1")
    s3.head_object(Bucket=BUCKET, Key="big")
    s3.put_object(Bucket=BUCKET, Key="small2", Body=b"x" * 100)
    assert proxy.counters()["corrupted"] == 2


def test_down_refuses_and_cuts_then_up_serves_again(proxy, data):
    idle = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    idle.request("GET", "/__fault__/stats")
    idle.getresponse().read()
    state = proxy.control("down")
    assert state["down"] is True
    s3 = s3_client(proxy.endpoint)
    with pytest.raises(EndpointConnectionError):
        s3.head_object(Bucket=BUCKET, Key="small")
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        idle.request("GET", "/__fault__/stats")  # the keep-alive connection was cut
        idle.getresponse().read()
    assert proxy.counters()["dropped"] >= 1
    assert proxy.control("up")["down"] is False
    assert s3.get_object(Bucket=BUCKET, Key="small")["Body"].read() == data["small"]
    proxy.control("down", port=proxy.port)  # through the proxied port itself
    with pytest.raises(EndpointConnectionError):
        s3.head_object(Bucket=BUCKET, Key="small")
    proxy.control("clear")
    s3.head_object(Bucket=BUCKET, Key="small")


def test_an_upstream_that_refuses_is_502(workdir):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    p = Proxy(workdir, f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(ClientError) as e:
            s3_client(p.endpoint).head_object(Bucket=BUCKET, Key="small")
        assert code(e)[0] == 502
        assert p.counters()["upstream_errors"] == 1
    finally:
        p.stop()


def test_signatures_still_verify_through_it(workdir, moto_auth):
    p = Proxy(workdir, moto_auth.endpoint)
    try:
        good = s3_client(p.endpoint, key=moto_auth.key)
        good.create_bucket(Bucket="signed")
        body = os.urandom(1024 * 1024 + 1)
        good.put_object(Bucket="signed", Key="k", Body=body)
        assert good.get_object(Bucket="signed", Key="k")["Body"].read() == body
        with pytest.raises(ClientError) as e:
            s3_client(p.endpoint, key=(moto_auth.key[0], "wrong")).get_object(Bucket="signed", Key="k")
        assert code(e) == (403, "SignatureDoesNotMatch")
        with pytest.raises(ClientError) as e:
            s3_client(p.endpoint, key=("AKIANOSUCHKEY0000000", "x")).get_object(Bucket="signed", Key="k")
        assert code(e) == (403, "InvalidAccessKeyId")
    finally:
        p.stop()


def test_control_refuses_what_it_does_not_know(proxy):
    for path in ("slowdown/2", "slowdown/x", "bogus", "delay/-1", "hang/maybe", "error500/1?count=0",
                 "error500/1?bogus=1", "corrupt"):
        with pytest.raises(urllib.error.HTTPError) as e:
            proxy.control(path)
        assert e.value.code == 400, path
    with pytest.raises(urllib.error.HTTPError) as e:
        proxy.control("stats", method="DELETE")
    assert e.value.code == 405
    assert proxy.stats()["faults"] == {}
    proxy.control("delay/0.1")
    proxy.control("delay/off")
    assert proxy.stats()["faults"] == {}
    assert proxy.control("stats", port=proxy.port, method="GET")["counters"]["control"] >= 1
    proxy.control("reset")
    assert proxy.counters()["control"] == 1  # the reset's own count after the reset
