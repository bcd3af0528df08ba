#!/usr/bin/env python3
"""A small S3 client for tests and tools/lib/s3.sh, through boto3 (the environment of
deploy/python-env.sh --s3), path-style, against $S3_ENDPOINT with $S3_ACCESS_KEY_ID,
$S3_SECRET_ACCESS_KEY and $S3_REGION (default us-east-1); --endpoint overrides the first.
  ping                      any HTTP answer from the endpoint (stdlib only: no boto3 import)
  mb BUCKET                 create a bucket
  put BUCKET KEY FILE       upload FILE ('-': stdin)
  get BUCKET KEY FILE       download into FILE ('-': stdout)
  ls BUCKET [PREFIX]        "SIZE KEY" lines, every page
  rm BUCKET KEY             delete a key
  iam-key USER [--all]      (moto, authentication off or with an admin key) an IAM user allowed s3:*
                            (--all: every action, an admin), and a new access key for it: prints
                            "ACCESS_KEY_ID SECRET_ACCESS_KEY"
  auth-on                   (moto) check every request's SigV4 signature and permissions from now on
                            (POST /moto-api/reset-auth 0)
--no-retries: one attempt per call (botocore retries 5xx, throttling and connection errors by
default). --no-verify: an https endpoint's certificate is not checked (a test server's own). Exit status: 0 done, 1 an error (its code on stderr), 3 no such key or bucket (404)."""
import argparse
import json
import os
import shutil
import sys
import urllib.error
import urllib.request


def client(args, service="s3"):
    import boto3
    from botocore.config import Config

    retries = {"total_max_attempts": 1, "mode": "standard"} if args.no_retries else {"mode": "standard"}
    return boto3.client(
        service,
        endpoint_url=args.endpoint,
        region_name=os.environ.get("S3_REGION", "us-east-1"),
        aws_access_key_id=os.environ.get("S3_ACCESS_KEY_ID", "kvstream-test"),
        aws_secret_access_key=os.environ.get("S3_SECRET_ACCESS_KEY", "kvstream-test-secret"),
        config=Config(retries=retries, s3={"addressing_style": "path"}, connect_timeout=5, read_timeout=60),
        verify=not args.no_verify,
    )


def ping(args):
    context = None
    if args.no_verify:
        import ssl
        context = ssl._create_unverified_context()
    try:
        urllib.request.urlopen(args.endpoint + "/", timeout=2, context=context).read()
    except urllib.error.HTTPError:
        pass  # an answer all the same
    return 0


def iam_key(args):
    iam = client(args, "iam")
    iam.create_user(UserName=args.user)
    action = "*" if args.all else "s3:*"
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": action, "Resource": "*"}]}
    iam.put_user_policy(UserName=args.user, PolicyName="kvstream-test", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=args.user)["AccessKey"]
    print(key["AccessKeyId"], key["SecretAccessKey"])
    return 0


def auth_on(args):
    # text/plain: a form content type would have Flask eat the body.
    req = urllib.request.Request(args.endpoint + "/moto-api/reset-auth", data=b"0", method="POST",
                                 headers={"Content-Type": "text/plain"})
    urllib.request.urlopen(req, timeout=10).read()
    return 0


def run(args):
    if args.cmd == "ping":
        return ping(args)
    if args.cmd == "auth-on":
        return auth_on(args)
    if args.cmd == "iam-key":
        return iam_key(args)
    s3 = client(args)
    if args.cmd == "mb":
        s3.create_bucket(Bucket=args.bucket)
    elif args.cmd == "put":
        if args.file == "-":
            s3.put_object(Bucket=args.bucket, Key=args.key, Body=sys.stdin.buffer.read())
        else:
            with open(args.file, "rb") as f:
                s3.put_object(Bucket=args.bucket, Key=args.key, Body=f)
    elif args.cmd == "get":
        body = s3.get_object(Bucket=args.bucket, Key=args.key)["Body"]
        if args.file == "-":
            shutil.copyfileobj(body, sys.stdout.buffer)
        else:
            with open(args.file, "wb") as f:
                shutil.copyfileobj(body, f)
    elif args.cmd == "ls":
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=args.bucket, Prefix=args.prefix):
            for o in page.get("Contents", []):
                print(o["Size"], o["Key"])
    elif args.cmd == "rm":
        s3.delete_object(Bucket=args.bucket, Key=args.key)
    return 0


def main():
    p = argparse.ArgumentParser(prog="s3cli", description=__doc__.split("\n")[0])
    p.add_argument("--endpoint", default=os.environ.get("S3_ENDPOINT"))
    p.add_argument("--no-retries", action="store_true")
    p.add_argument("--no-verify", action="store_true")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("ping")
    sub.add_parser("auth-on")
    s = sub.add_parser("iam-key")
    s.add_argument("user")
    s.add_argument("--all", action="store_true")
    sub.add_parser("mb").add_argument("bucket")
    for name in ("put", "get"):
        s = sub.add_parser(name)
        s.add_argument("bucket")
        s.add_argument("key")
        s.add_argument("file")
    s = sub.add_parser("ls")
    s.add_argument("bucket")
    s.add_argument("prefix", nargs="?", default="")
    s = sub.add_parser("rm")
    s.add_argument("bucket")
    s.add_argument("key")
    args = p.parse_args()
    if not args.endpoint:
        p.error("no endpoint: set S3_ENDPOINT or give --endpoint")
    args.endpoint = args.endpoint.rstrip("/")
    try:
        return run(args)
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        print(f"s3cli: {args.cmd}: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # botocore's errors, without importing botocore for ping
        response = getattr(e, "response", None)
        if response is None:
            print(f"s3cli: {args.cmd}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = response.get("Error", {}).get("Code")
        print(f"s3cli: {args.cmd}: {code} (HTTP {status})", file=sys.stderr)
        return 3 if status == 404 else 1


if __name__ == "__main__":
    sys.exit(main())
