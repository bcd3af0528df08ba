# shellcheck shell=bash
# The one option convention of tools/*.sh: a script declares its options in a table and this
# parses the command line by it. tools/lib/common.sh sources it (die, usage_error, show_help are
# there); a script sets its defaults, then:
#   parse_options '
#     --fast       fast            (takes a value: --fast 300 sets fast=300)
#     --gbs        gbs=1           (a flag: sets gbs to 1)
#     --key        key=1 shared=1  (a flag setting several variables)
#     FAST_MBPS    fast            (a positional argument, in the order of the rows)
#     --           bench_args      (everything after -- goes into the array bench_args)
#   ' "$@"
# (without the parenthesised notes: a row is OPTION then its variables, # starts a comment).
# Every script also answers -h and --help (show_help, exit status 0). An argument that matches no
# row is a usage error ("PROG: unknown argument 'ARG' (--help)", exit status 2), as is an option
# that takes a value given last ("PROG: --fast takes a value"). The word after an option that takes
# a value is its value, whatever it is (--check "" sets check to empty). An option given twice
# keeps the last value. Without a `--` row, `--` is an unknown argument.

# parse_options TABLE [ARG...]: sets the variables TABLE names from ARG... (see above).
parse_options() {
  local _po_table=$1 _po_opt _po_vars _po_var _po_arg _po_rest=""
  local -A _po_value=() _po_flag=()
  local -a _po_positional=()
  shift
  while read -r _po_opt _po_vars; do
    _po_vars=${_po_vars%%#*}
    case $_po_opt in ""|"#"*) continue ;; esac
    for _po_var in $_po_vars; do
      [[ $_po_var =~ ^[A-Za-z_][A-Za-z0-9_]*(=.*)?$ ]] || die "options table: '$_po_var' is not a variable"
    done
    read -r _po_var _po_vars <<< "$_po_vars"
    if [[ $_po_var == *=* ]]; then
      [[ $_po_opt == -?* ]] || die "options table: '$_po_opt' is not an option, so it cannot be a flag"
      _po_flag[$_po_opt]="$_po_var $_po_vars"
    else
      if [ -z "$_po_var" ] || [ -n "$_po_vars" ]; then die "options table: '$_po_opt' takes one variable"; fi
      case $_po_opt in
        --) _po_rest=$_po_var ;;
        -*) _po_value[$_po_opt]=$_po_var ;;
        *) _po_positional+=("$_po_var") ;;
      esac
    fi
  done <<< "$_po_table"

  while [ $# -gt 0 ]; do
    _po_arg=$1
    shift
    if [[ $_po_arg != -* ]]; then
      [ ${#_po_positional[@]} -gt 0 ] || usage_error "unknown argument '$_po_arg' (--help)"
      printf -v "${_po_positional[0]}" '%s' "$_po_arg"
      _po_positional=("${_po_positional[@]:1}")
    elif [ "$_po_arg" = -h ] || [ "$_po_arg" = --help ]; then
      show_help
      exit 0
    elif [ "$_po_arg" = -- ] && [ -n "$_po_rest" ]; then
      eval "$_po_rest=(\"\$@\")"
      return 0
    elif [ -n "${_po_value[$_po_arg]+set}" ]; then
      [ $# -gt 0 ] || usage_error "$_po_arg takes a value"
      printf -v "${_po_value[$_po_arg]}" '%s' "$1"
      shift
    elif [ -n "${_po_flag[$_po_arg]+set}" ]; then
      for _po_var in ${_po_flag[$_po_arg]}; do
        printf -v "${_po_var%%=*}" '%s' "${_po_var#*=}"
      done
    else
      usage_error "unknown argument '$_po_arg' (--help)"
    fi
  done
}
