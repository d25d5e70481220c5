# The simulated kubeadm (appended to shimPreamble, see sandbox.go). It is as
# strict as the real kubeadm (v1.31+) about what it accepts: the same flags,
# parsed the way cobra/pflag parse them, the same discovery requirements and
# validation, and the providerID reaches the (simulated) kubelet only the
# ways it reaches a real one: KUBELET_EXTRA_ARGS in /etc/default/kubelet or
# a JoinConfiguration's nodeRegistration.kubeletExtraArgs. What a real
# kubeadm rejects, this one rejects, with the message kubeadm prints.
#
# A successful join is recorded in $sandbox/var/lib/kubelet/joined (the
# simulated VM reports it to the simulated cluster) and, like the real one,
# writes /etc/kubernetes/kubelet.conf; reset removes both.

joined="$sandbox/var/lib/kubelet/joined"
kubelet_conf="$sandbox/etc/kubernetes/kubelet.conf"
kubelet_defaults="$sandbox/etc/default/kubelet"

# fail reports an error the way kubeadm does (to stderr, with the hint about
# the stack trace) and exits 1.
fail() {
	printf '%s\n' "$1" >&2
	echo "To see the stack trace of this error execute with --v=5 or higher" >&2
	exit 1
}

# flag_type CMD NAME sets ftype to the type of flag --NAME of command CMD
# (root, join, reset): bool, string, slice, int, uint, level; "" if the
# command has no such flag.
flag_type() {
	case "$1:$2" in
	*:help | *:add-dir-header | *:one-output | *:skip-headers | *:skip-log-headers) ftype=bool ;;
	*:rootfs | *:log-file) ftype=string ;;
	*:log-file-max-size) ftype=uint ;;
	*:v) ftype=level ;;
	join:control-plane | join:discovery-token-unsafe-skip-ca-verification | join:dry-run) ftype=bool ;;
	join:apiserver-advertise-address | join:certificate-key | join:config | join:cri-socket | \
		join:discovery-file | join:discovery-token | join:node-name | join:patches | \
		join:tls-bootstrap-token | join:token) ftype=string ;;
	join:discovery-token-ca-cert-hash | join:ignore-preflight-errors | join:skip-phases) ftype=slice ;;
	join:apiserver-bind-port) ftype=int ;;
	reset:force | reset:cleanup-tmp-dir | reset:dry-run) ftype=bool ;;
	reset:cert-dir | reset:config | reset:cri-socket | reset:kubeconfig) ftype=string ;;
	reset:ignore-preflight-errors | reset:skip-phases) ftype=slice ;;
	*) ftype="" ;;
	esac
}

# short_flag CMD C sets sname to the long name of shorthand -C, or "".
short_flag() {
	case "$1:$2" in
	*:h) sname=help ;;
	*:v) sname=v ;;
	reset:f) sname=force ;;
	*) sname="" ;;
	esac
}

# set_flag CMD NAME VALUE checks VALUE against the type in ftype, as pflag
# does, and hands it to CMD's flag handler.
set_flag() {
	case "$1:$2" in
	*:v) disp="-v, --v" ;;
	*:help) disp="-h, --help" ;;
	reset:force) disp="-f, --force" ;;
	*) disp="--$2" ;;
	esac
	v=$3
	case "$ftype" in
	bool)
		case "$v" in
		1 | t | T | TRUE | true | True) v=true ;;
		0 | f | F | FALSE | false | False) v=false ;;
		*) fail "invalid argument \"$3\" for \"$disp\" flag: strconv.ParseBool: parsing \"$3\": invalid syntax" ;;
		esac ;;
	int | level)
		case "$v" in
		"" | [+-] | *[!0-9+-]* | ?*[+-]*)
			fail "invalid argument \"$3\" for \"$disp\" flag: strconv.ParseInt: parsing \"$3\": invalid syntax" ;;
		esac ;;
	uint)
		case "$v" in
		"" | *[!0-9]*)
			fail "invalid argument \"$3\" for \"$disp\" flag: strconv.ParseUint: parsing \"$3\": invalid syntax" ;;
		esac ;;
	esac
	changed="$changed $2"
	case "$1" in
	join) join_flag "$2" "$v" ;;
	reset) reset_flag "$2" "$v" ;;
	root) [ "$2" != help ] || help=$v ;;
	esac
}

add_pos() {
	npos=$((npos + 1))
	case $npos in
	1) pos1=$1 ;;
	2) pos2=$1 ;;
	esac
}

# parse_flags CMD ARG... parses the arguments of CMD like cobra and pflag:
# flags anywhere ("--name value", "--name=value", booleans without a value,
# "-v 5", "-v5", "-v=5", "-fv5"), "--" ends the flags. Positional arguments
# are counted in npos, the first two kept in pos1 and pos2; the names of
# the flags set are listed in changed.
parse_flags() {
	pcmd=$1
	shift
	npos=0 pos1="" pos2="" changed=""
	while [ $# -gt 0 ]; do
		a=$1
		shift
		case "$a" in
		--)
			for a in "$@"; do add_pos "$a"; done
			return ;;
		--*)
			name=${a#--}
			hasval=0 val=""
			case "$name" in
			*=*) val=${name#*=} name=${name%%=*} hasval=1 ;;
			esac
			case "$name" in
			"" | -*) fail "bad flag syntax: $a" ;;
			esac
			flag_type "$pcmd" "$name"
			[ -n "$ftype" ] || fail "unknown flag: --$name"
			if [ $hasval = 0 ]; then
				if [ "$ftype" = bool ]; then
					val=true
				elif [ $# -gt 0 ]; then
					val=$1
					shift
				else
					fail "flag needs an argument: --$name"
				fi
			fi
			set_flag "$pcmd" "$name" "$val" ;;
		-?*)
			s=${a#-}
			while [ -n "$s" ]; do
				c=${s%"${s#?}"}
				rest=${s#?}
				short_flag "$pcmd" "$c"
				[ -n "$sname" ] || fail "unknown shorthand flag: '$c' in -$s"
				flag_type "$pcmd" "$sname"
				case "$rest" in
				=?*) val=${rest#=} rest="" ;;
				*)
					if [ "$ftype" = bool ]; then
						val=true
					elif [ -n "$rest" ]; then
						val=$rest rest=""
					elif [ $# -gt 0 ]; then
						val=$1
						shift
					else
						fail "flag needs an argument: '$c' in -$s"
					fi ;;
				esac
				set_flag "$pcmd" "$sname" "$val"
				s=$rest
			done ;;
		*) add_pos "$a" ;;
		esac
	done
}

# check_mixed fails like kubeadm if flags other than those allowed beside
# --config were set.
check_mixed() {
	mixed=""
	for f in $changed; do
		case "$f" in
		config | ignore-preflight-errors | dry-run | kubeconfig | node-name | rootfs | v | log-file | skip-*) ;;
		*) mixed="$mixed $f" ;;
		esac
	done
	if [ -n "$mixed" ]; then
		mixed=$(printf '%s\n' $mixed | sort -u | tr '\n' ' ')
		fail "can not mix '--config' with arguments [${mixed% }]"
	fi
}

# trim sets t to $1 without leading and trailing white space.
trim() {
	t=${1#"${1%%[![:space:]]*}"}
	t=${t%"${t##*[![:space:]]}"}
}

# The YAML reader for --config: enough YAML for the files people write
# (block mappings and sequences, one-line flow sequences and mappings,
# quoted scalars, comments, several documents). It prints the document of
# kind "want" as path=value lines, e.g. nodeRegistration.name=n1 and
# discovery.bootstrapToken.caCertHashes[0]=sha256:..., a key without a
# scalar value as path= and, for a v1beta4 kubeletExtraArgs list entry named
# provider-id, kubeletExtraArgs.list.provider-id=VALUE. Without such a
# document it prints "missing".
yaml_awk='
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
function scalar(s,   q, i) {
	s = trim(s)
	q = substr(s, 1, 1)
	if (q == "\"" || q == "\047") {
		i = index(substr(s, 2), q)
		return i ? substr(s, 2, i - 1) : substr(s, 2)
	}
	sub(/[ \t]+#.*$/, "", s)
	return s
}
function path(n,   p, j) {
	p = name[1]
	for (j = 2; j <= n; j++) p = p (substr(name[j], 1, 1) == "[" ? "" : ".") name[j]
	return p
}
function put(p, v) { n_out[doc]++; outp[doc, n_out[doc]] = p; outv[doc, n_out[doc]] = v; val[doc, p] = v }
function flow(p, v,   inner, items, n, j, it, k, i) {
	put(p, "")
	inner = substr(v, 2, length(v) - 2)
	n = split(inner, items, ",")
	for (j = 1; j <= n; j++) {
		it = trim(items[j])
		if (it == "") continue
		if (substr(v, 1, 1) == "[") {
			i = cnt[doc, p]++
			put(p "[" i "]", scalar(it))
			continue
		}
		k = index(it, ":")
		if (k) put(p "." scalar(substr(it, 1, k - 1)), scalar(substr(it, k + 1)))
	}
}
BEGIN { doc = 0; depth = 0 }
{ sub(/\r$/, "") }
/^(---|\.\.\.)([ \t].*)?$/ { doc++; depth = 0; next }
/^[ \t]*(#.*)?$/ { next }
{
	match($0, /^ */); ind = RLENGTH; body = substr($0, ind + 1)
	if (body ~ /^-([ \t]|$)/) {
		while (depth > 0 && (ind_[depth] > ind || (ind_[depth] == ind && item_[depth]))) depth--
		p = path(depth)
		idx = cnt[doc, p]++
		depth++; name[depth] = "[" idx "]"; ind_[depth] = ind; item_[depth] = 1
		body = substr(body, 2)
		match(body, /^[ \t]*/); ind += 1 + RLENGTH; body = substr(body, RLENGTH + 1)
		if (body == "") next
		if (!match(body, /:([ \t]|$)/) || body ~ /^["\047\[{]/) {
			v = scalar(body)
			if (v ~ /^[\[{]/) flow(path(depth), v); else put(path(depth), v)
			next
		}
	} else {
		while (depth > 0 && ind_[depth] >= ind) depth--
		if (!match(body, /:([ \t]|$)/)) next
	}
	k = scalar(substr(body, 1, RSTART - 1)); v = scalar(substr(body, RSTART + 1))
	depth++; name[depth] = k; ind_[depth] = ind; item_[depth] = 0
	p = path(depth)
	if (v ~ /^[\[{]/) flow(p, v); else put(p, v)
	if (depth == 1 && k == "kind") kind[doc] = v
}
END {
	for (d = 0; d <= doc; d++) if (kind[d] == want) break
	if (d > doc) { print "missing"; exit }
	for (j = 1; j <= n_out[d]; j++) print outp[d, j] "=" outv[d, j]
	for (j = 0; (d, "nodeRegistration.kubeletExtraArgs[" j "].name") in val; j++)
		if (val[d, "nodeRegistration.kubeletExtraArgs[" j "].name"] == "provider-id")
			print "kubeletExtraArgs.list.provider-id=" val[d, "nodeRegistration.kubeletExtraArgs[" j "].value"]
}
'

# read_config KIND FILE sets cfg to the document of KIND in FILE (see
# yaml_awk), failing like kubeadm if there is none or its apiVersion is not
# one this kubeadm reads.
read_config() {
	[ -f "$2" ] || fail "unable to read config from \"$2\" : open $2: no such file or directory"
	cfg=$(awk -v want="$1" "$yaml_awk" "$2") || fail "unable to read config from \"$2\""
	[ "$cfg" != missing ] || fail "no $1 found in the supplied config"
	api=""
	while IFS= read -r line; do
		case "$line" in
		apiVersion=*) api=${line#apiVersion=} ;;
		esac
	done <<EOF
$cfg
EOF
	case "$1:$api" in
	JoinConfiguration:kubeadm.k8s.io/v1beta3 | JoinConfiguration:kubeadm.k8s.io/v1beta4) ;;
	ResetConfiguration:kubeadm.k8s.io/v1beta4) ;;
	*:kubeadm.k8s.io/v1beta1 | *:kubeadm.k8s.io/v1beta2)
		fail "your configuration file uses an old API spec: \"$api\" (kind: \"$1\"). Please use kubeadm v1.22 instead and run 'kubeadm config migrate --old-config old.yaml --new-config new.yaml', which will write the new, similar spec using a newer API version." ;;
	*) fail "no kind \"$1\" is registered for version \"$api\" in scheme \"k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/scheme/scheme.go:31\"" ;;
	esac
}

# read_kubelet_defaults sets provider from the last --provider-id in
# KUBELET_EXTRA_ARGS of /etc/default/kubelet, which the kubelet's systemd
# drop-in (Debian/Ubuntu packages) reads as an EnvironmentFile and appends
# to the kubelet's command line, after kubeadm's own flags: it wins over a
# JoinConfiguration's kubeletExtraArgs.
read_kubelet_defaults() {
	[ -f "$kubelet_defaults" ] || return 0
	extra="" found=0
	while IFS= read -r line || [ -n "$line" ]; do
		trim "$line"
		case "$t" in
		KUBELET_EXTRA_ARGS=*) extra=${t#KUBELET_EXTRA_ARGS=} found=1 ;;
		esac
	done <"$kubelet_defaults"
	[ $found = 1 ] || return 0
	case "$extra" in
	\"*\") extra=${extra#\"} extra=${extra%\"} ;;
	\'*\') extra=${extra#\'} extra=${extra%\'} ;;
	esac
	set -f
	# shellcheck disable=SC2086 # systemd splits $KUBELET_EXTRA_ARGS at white space
	set -- $extra
	set +f
	while [ $# -gt 0 ]; do
		case "$1" in
		--provider-id=*) provider=${1#--provider-id=} ;;
		--provider-id)
			[ $# -lt 2 ] || {
				provider=$2
				shift
			} ;;
		--) break ;;
		esac
		shift
	done
}

# valid_token reports whether $1 is a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16}).
t6='[a-z0-9][a-z0-9][a-z0-9][a-z0-9][a-z0-9][a-z0-9]'
t16="$t6$t6[a-z0-9][a-z0-9][a-z0-9][a-z0-9]"
valid_token() {
	case "$1" in
	$t6.$t16) return 0 ;;
	esac
	return 1
}

# check_endpoint sets eperr to what net.SplitHostPort says of $1, if wrong.
check_endpoint() {
	case "$1" in
	"") eperr="missing port in address" ;;
	\[*\]:*) eperr="" ;;
	\[*\]) eperr="address $1: missing port in address" ;;
	\[*) eperr="address $1: missing ']' in address" ;;
	*:*:*) eperr="address $1: too many colons in address" ;;
	*:*) eperr="" ;;
	*) eperr="address $1: missing port in address" ;;
	esac
	[ -z "$eperr" ]
}

# check_hash sets herr to what kubeadm's pubkeypin says of CA certificate
# hash $1, if wrong: it must be sha256:<64 hex digits>.
h8='[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]'
h64="$h8$h8$h8$h8$h8$h8$h8$h8"
check_hash() {
	case "$1" in
	*:*:*) herr="invalid hash, expected \"format:hex-value\". Known format(s) are: sha256" ;;
	*:*) herr="" ;;
	*) herr="invalid hash, expected \"format:hex-value\". Known format(s) are: sha256" ;;
	esac
	[ -z "$herr" ] || return 1
	hfmt=${1%%:*} hval=${1#*:}
	case "$hfmt" in
	[sS][hH][aA]256) ;;
	*)
		herr="unknown hash format \"$hfmt\". Known format(s) are: sha256"
		return 1 ;;
	esac
	case "$hval" in
	$h64) return 0 ;;
	esac
	if [ $((${#hval} / 2)) -ne 32 ]; then
		herr="invalid hash \"$1\", expected a 32 byte SHA-256 hash, found $((${#hval} / 2)) bytes"
	else
		herr="invalid hash \"$1\", could not decode SHA-256 from hex"
	fi
	return 1
}

# add_err adds $1 to the validation errors in errs (nerr of them).
add_err() {
	nerr=$((nerr + 1))
	if [ $nerr -eq 1 ]; then errs=$1; else errs="$errs, $1"; fi
}

# check_ignore lowercases the --ignore-preflight-errors list (ignore, with
# a leading comma) and fails like kubeadm if it has "all" and other checks.
check_ignore() {
	case "$ignore" in
	*[A-Z]*) ignore=$(printf '%s' "$ignore" | tr 'A-Z' 'a-z') ;;
	esac
	has_all=0 has_other=0
	old_ifs=$IFS
	IFS=,
	set -f
	for it in $ignore; do
		case "$it" in
		"") ;;
		all) has_all=1 ;;
		*) has_other=1 ;;
		esac
	done
	set +f
	IFS=$old_ifs
	[ "$has_all$has_other" != 11 ] ||
		fail "ignore-preflight-errors: Invalid value: \"${ignore#,}\": don't specify individual checks if 'all' is used"
}

join_flag() {
	case "$1" in
	help) help=$2 ;;
	node-name) f_node=$2 ;;
	token) f_token=$2 ;;
	discovery-token) f_dtoken=$2 ;;
	tls-bootstrap-token) f_tls=$2 ;;
	discovery-file) f_file=$2 ;;
	discovery-token-ca-cert-hash) f_hashes="$f_hashes,$2" ;;
	discovery-token-unsafe-skip-ca-verification) f_unsafe=$2 ;;
	config) f_config=$2 f_config_set=1 ;;
	ignore-preflight-errors) ignore="$ignore,$2" ;;
	dry-run) dry_run=$2 ;;
	esac
}

join_usage() {
	cat <<'EOF'
Run this on any machine you wish to join an existing cluster

Usage:
  kubeadm join [api-server-endpoint] [flags]

Flags:
      --apiserver-advertise-address string            If the node should host a new control plane instance, the IP address the API Server will advertise it's listening on.
      --apiserver-bind-port int32                     If the node should host a new control plane instance, the port for the API Server to bind to. (default 6443)
      --certificate-key string                        Use this key to decrypt the certificate secrets uploaded by init.
      --config string                                 Path to a kubeadm configuration file.
      --control-plane                                 Create a new control plane instance on this node
      --cri-socket string                             Path to the CRI socket to connect.
      --discovery-file string                         For file-based discovery, a file or URL from which to load cluster information.
      --discovery-token string                        For token-based discovery, the token used to validate cluster information fetched from the API server.
      --discovery-token-ca-cert-hash strings          For token-based discovery, validate that the root CA public key matches this hash (format: "<type>:<value>").
      --discovery-token-unsafe-skip-ca-verification   For token-based discovery, allow joining without --discovery-token-ca-cert-hash pinning.
      --dry-run                                       Don't apply any changes; just output what would be done.
  -h, --help                                          help for join
      --ignore-preflight-errors strings               A list of checks whose errors will be shown as warnings.
      --node-name string                              Specify the node name.
      --patches string                                Path to a directory that contains files named "target[suffix][+patchtype].extension".
      --skip-phases strings                           List of phases to be skipped
      --tls-bootstrap-token string                    Specify the token used to temporarily authenticate with the Kubernetes Control Plane while joining the node.
      --token string                                  Use this token for both discovery-token and tls-bootstrap-token when those values are not provided.

Global Flags:
      --add-dir-header           If true, adds the file directory to the header of the log messages
      --log-file string          If non-empty, use this log file
      --log-file-max-size uint   Defines the maximum size a log file can grow to. (default 1800)
      --one-output               If true, only write logs to their native severity level
      --rootfs string            The path to the 'real' host root filesystem.
      --skip-headers             If true, avoid header prefixes in the log messages
      --skip-log-headers         If true, avoid headers when opening log files
  -v, --v Level                  number for the log level verbosity

(The simulated kubeadm of nodesmith's simvm: it checks what it is given as
the real one does, and records the join for the simulated cluster.)
EOF
}

do_join() {
	help=false f_node="" f_token="" f_dtoken="" f_tls="" f_file="" f_hashes="" f_unsafe=false
	f_config="" f_config_set="" ignore="" dry_run=false
	parse_flags join "$@"
	if [ "$help" = true ]; then
		join_usage
		exit 0
	fi
	[ "$pos1" != phase ] || fail "the simulated kubeadm does not implement \"kubeadm join phase\""
	[ "$npos" -le 1 ] || fail "accepts at most 1 arg(s), received $npos"
	[ -z "$f_config_set" ] || check_mixed

	# The JoinConfiguration: from the file, or from the flags.
	bt="" endpoint="" dtoken="" tls="" hashes="" unsafe=false file_set="" file="" cfg_node="" provider=""
	if [ -n "$f_config" ]; then
		read_config JoinConfiguration "$f_config"
		args_form=""
		while IFS= read -r line; do
			v=${line#*=}
			case "$line" in
			discovery.bootstrapToken=*) bt=1 ;;
			discovery.bootstrapToken.apiServerEndpoint=*) endpoint=$v ;;
			discovery.bootstrapToken.token=*) dtoken=$v ;;
			discovery.bootstrapToken.caCertHashes\[*) hashes="$hashes,$v" ;;
			discovery.bootstrapToken.unsafeSkipCAVerification=*)
				case "$v" in true | True | TRUE) unsafe=true ;; esac ;;
			discovery.file=*) file_set=1 ;;
			discovery.file.kubeConfigPath=*) file=$v ;;
			discovery.tlsBootstrapToken=*) tls=$v ;;
			nodeRegistration.name=*) cfg_node=$v ;;
			nodeRegistration.ignorePreflightErrors\[*) ignore="$ignore,$v" ;;
			nodeRegistration.kubeletExtraArgs\[*) args_form=list ;;
			nodeRegistration.kubeletExtraArgs.provider-id=*) args_form=map provider=$v ;;
			nodeRegistration.kubeletExtraArgs.*) args_form=map ;;
			kubeletExtraArgs.list.provider-id=*) provider=$v ;;
			dryRun=*) case "$v" in true | True | TRUE) dry_run=true ;; esac ;;
			esac
		done <<EOF
$cfg
EOF
		case "$api:$args_form" in
		*v1beta3:list)
			fail "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array into Go struct field NodeRegistrationOptions.nodeRegistration.kubeletExtraArgs of type map[string]string" ;;
		*v1beta4:map)
			fail "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal object into Go struct field NodeRegistrationOptions.nodeRegistration.kubeletExtraArgs of type []v1beta4.Arg" ;;
		esac
	else
		dtoken=$f_dtoken tls=$f_tls
		if [ -n "$f_token" ]; then
			[ -n "$dtoken" ] || dtoken=$f_token
			[ -n "$tls" ] || tls=$f_token
		fi
		[ -z "$f_file" ] || file_set=1 file=$f_file
		[ "$npos" -eq 0 ] || bt=1 endpoint=$pos1
		hashes=$f_hashes unsafe=$f_unsafe
	fi
	[ -z "$bt" ] || [ -n "$tls" ] || tls=$dtoken

	# The node name: --node-name, else the configuration's, else the
	# hostname; trimmed and lowercased as kubeadm does.
	node=$f_node
	[ -n "$node" ] || node=$cfg_node
	if [ -z "$node" ] && [ -f "$sandbox/etc/hostname" ]; then
		IFS= read -r node <"$sandbox/etc/hostname" || true
	fi
	trim "$node"
	node=$t
	case "$node" in
	*[A-Z]*) node=$(printf '%s' "$node" | tr 'A-Z' 'a-z') ;;
	esac

	# Validation, collected and reported together like kubeadm's.
	errs="" nerr=0
	[ -n "$bt" ] || [ -n "$file_set" ] || add_err 'discovery: Invalid value: "": bootstrapToken or file must be set'
	[ -z "$bt" ] || [ -z "$file_set" ] || add_err 'discovery: Invalid value: "": bootstrapToken and file cannot both be set'
	if [ -n "$bt" ]; then
		[ -n "$endpoint" ] || add_err "discovery.bootstrapToken: Required value: APIServerEndpoint is not set"
		case "$hashes" in
		*[!,]*) ;;
		*)
			[ "$unsafe" = true ] ||
				add_err 'discovery.bootstrapToken.caCertHashes: Invalid value: "": using token-based discovery without caCertHashes can be unsafe. Set unsafeSkipCAVerification as true in your kubeadm config file or pass --discovery-token-unsafe-skip-ca-verification flag to continue' ;;
		esac
		valid_token "$dtoken" || add_err "discovery.bootstrapToken.token: Invalid value: \"$dtoken\": the bootstrap token is invalid"
		check_endpoint "$endpoint" || add_err "discovery.bootstrapToken.apiServerEndpoint: Invalid value: \"$endpoint\": $eperr"
		valid_token "$tls" || add_err "discovery.tlsBootstrapToken: Invalid value: \"$tls\": the bootstrap token is invalid"
	fi
	if [ -n "$file_set" ]; then
		case "$file" in
		https://*) ;;
		[a-zA-Z]*:*)
			case "${file%%:*}" in
			*[!a-zA-Z0-9+.-]*) [ -e "$file" ] || add_err "discovery.file.kubeConfigPath: Invalid value: \"$file\": not a valid HTTPS URL or a file on disk" ;;
			*) add_err "discovery.file.kubeConfigPath: Invalid value: \"$file\": if a URL is used, the scheme must be https" ;;
			esac ;;
		*) [ -e "$file" ] || add_err "discovery.file.kubeConfigPath: Invalid value: \"$file\": not a valid HTTPS URL or a file on disk" ;;
		esac
		[ -z "$tls" ] || valid_token "$tls" || add_err "discovery.tlsBootstrapToken: Invalid value: \"$tls\": the bootstrap token is invalid"
	fi
	case "$node" in
	"")
		add_err "nodeRegistration: Required value: --node-name or .nodeRegistration.name in the config file is a required value. It seems like this value couldn't be automatically detected in your environment, please specify the desired value using the CLI or config file." ;;
	*[!a-z0-9.-]* | -* | *-)
		add_err "nodeRegistration.name: Invalid value: \"$node\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'" ;;
	esac
	if [ $nerr -gt 1 ]; then
		fail "[$errs]"
	elif [ $nerr -eq 1 ]; then
		fail "$errs"
	fi
	check_ignore

	# Preflight: the node must not have joined already; then discovery,
	# which checks the CA certificate hashes.
	echo "[preflight] Running pre-flight checks"
	if [ -f "$joined" ] || [ -f "$kubelet_conf" ]; then
		case ",$ignore," in
		*,all,* | *,fileavailable--etc-kubernetes-kubelet.conf,*) ;;
		*)
			fail "error execution phase preflight: [preflight] Some fatal errors occurred:
	[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists
[preflight] If you know what you are doing, you can make a check non-fatal with '--ignore-preflight-errors=...'" ;;
		esac
	fi
	if [ -n "$bt" ]; then
		old_ifs=$IFS
		IFS=,
		set -f
		for h in $hashes; do
			[ -z "$h" ] || check_hash "$h" ||
				fail "error execution phase preflight: couldn't validate the identity of the API Server: invalid discovery token CA certificate hash: $herr"
		done
		set +f
		IFS=$old_ifs
	fi

	# The kubelet starts with its arguments: the JoinConfiguration's, then
	# KUBELET_EXTRA_ARGS from /etc/default/kubelet.
	read_kubelet_defaults
	if [ "$dry_run" = true ]; then
		echo "[dryrun] Would write the kubelet configuration and start the kubelet as node \"$node\""
		echo "[dryrun] Finished dry-running successfully. Above are the resources that would be created"
		exit 0
	fi
	[ -d "${joined%/*}" ] || mkdir -p "${joined%/*}" || exit 1
	[ -d "${kubelet_conf%/*}" ] || mkdir -p "${kubelet_conf%/*}" || exit 1
	tmp="$joined.tmp.$$"
	printf 'node-name=%s\nprovider-id=%s\n' "$node" "$provider" >"$tmp" && mv -f "$tmp" "$joined" || exit 1
	printf 'apiVersion: v1\nkind: Config\n# written by the simulated kubeadm join of node %s\n' "$node" >"$kubelet_conf" || exit 1
	echo "[kubelet-start] Writing kubelet configuration to file \"/var/lib/kubelet/config.yaml\""
	echo "[kubelet-start] Starting the kubelet"
	echo "[kubelet-start] Waiting for the kubelet to perform the TLS Bootstrap"
	echo ""
	echo "This node has joined the cluster:"
	echo "* Certificate signing request was sent to apiserver and a response was received."
	echo "* The Kubelet was informed of the new secure connection details."
	echo ""
	echo "Run 'kubectl get nodes' on the control-plane to see this node join the cluster."
}

reset_flag() {
	case "$1" in
	help) help=$2 ;;
	force) force=$2 ;;
	dry-run) dry_run=$2 ;;
	config) f_config=$2 f_config_set=1 ;;
	esac
}

reset_usage() {
	cat <<'EOF'
Performs a best effort revert of changes made to this host by 'kubeadm init' or 'kubeadm join'

Usage:
  kubeadm reset [flags]

Flags:
      --cert-dir string                  The path to the directory where the certificates are stored. (default "/etc/kubernetes/pki")
      --cleanup-tmp-dir                  Cleanup the "/etc/kubernetes/tmp" directory
      --config string                    Path to a kubeadm configuration file.
      --cri-socket string                Path to the CRI socket to connect.
      --dry-run                          Don't apply any changes; just output what would be done.
  -f, --force                            Reset the node without prompting for confirmation.
  -h, --help                             help for reset
      --ignore-preflight-errors strings  A list of checks whose errors will be shown as warnings.
      --kubeconfig string                The kubeconfig file to use when talking to the cluster. (default "/etc/kubernetes/admin.conf")
      --skip-phases strings              List of phases to be skipped

(Global flags as for kubeadm join.)
EOF
}

do_reset() {
	help=false force=false dry_run=false f_config="" f_config_set=""
	parse_flags reset "$@"
	if [ "$help" = true ]; then
		reset_usage
		exit 0
	fi
	[ "$pos1" != phase ] || fail "the simulated kubeadm does not implement \"kubeadm reset phase\""
	[ -z "$f_config_set" ] || check_mixed
	if [ -n "$f_config" ]; then
		read_config ResetConfiguration "$f_config"
		while IFS= read -r line; do
			case "$line" in
			force=true | force=True | force=TRUE) force=true ;;
			dryRun=true | dryRun=True | dryRun=TRUE) dry_run=true ;;
			esac
		done <<EOF
$cfg
EOF
	fi
	if [ "$force" != true ] && [ "$dry_run" != true ]; then
		echo "[reset] WARNING: Changes made to this host by 'kubeadm init' or 'kubeadm join' will be reverted." >&2
		printf '[reset] Are you sure you want to proceed? [y/N]: '
		answer=""
		IFS= read -r answer || true
		cr=$(printf '\r')
		case "$answer" in
		y | Y | y"$cr" | Y"$cr") ;;
		*)
			echo
			fail "error execution phase preflight: aborted reset operation" ;;
		esac
	fi
	echo "[preflight] Running pre-flight checks"
	if [ "$dry_run" = true ]; then
		echo "[dryrun] Would stop the kubelet service"
		echo "[dryrun] Would delete contents of directories: [/etc/kubernetes/manifests /var/lib/kubelet /etc/kubernetes/pki]"
		exit 0
	fi
	rm -f "$joined" "$kubelet_conf"
	echo "[reset] Stopping the kubelet service"
	echo "[reset] Unmounting mounted directories in \"/var/lib/kubelet\""
	echo "[reset] Deleting contents of directories: [/etc/kubernetes/manifests /var/lib/kubelet /etc/kubernetes/pki]"
	echo "[reset] Deleting files: [/etc/kubernetes/admin.conf /etc/kubernetes/super-admin.conf /etc/kubernetes/kubelet.conf /etc/kubernetes/bootstrap-kubelet.conf /etc/kubernetes/controller-manager.conf /etc/kubernetes/scheduler.conf]"
}

kubeadm_usage() {
	cat <<'EOF'
kubeadm: easily bootstrap a secure Kubernetes cluster

Usage:
  kubeadm [command]

Available Commands (in the simulated kubeadm):
  join        Run this on any machine you wish to join an existing cluster
  reset       Performs a best effort revert of changes made to this host by 'kubeadm init' or 'kubeadm join'
  version     Print the version of kubeadm

Use "kubeadm [command] --help" for more information about a command.
EOF
}

# The subcommand is found as cobra finds it: the first argument that is
# neither a flag nor the value of a "--flag value" / "-f value" (any flag
# not known here as a boolean takes the next argument).
cmd="" cmdi=0 i=0 skip=0
for a in "$@"; do
	i=$((i + 1))
	if [ $skip = 1 ]; then
		skip=0
		continue
	fi
	case "$a" in
	--) break ;;
	--*=* | --help | --add-dir-header | --one-output | --skip-headers | --skip-log-headers | -h) ;;
	--* | -?) skip=1 ;;
	-*) ;;
	*)
		cmd=$a cmdi=$i
		break ;;
	esac
done
if [ -z "$cmd" ]; then
	help=false
	parse_flags root "$@"
	[ "$npos" -eq 0 ] || fail "unknown command \"$pos1\" for \"kubeadm\""
	kubeadm_usage
	exit 0
fi
i=0
for a in "$@"; do # the list is expanded before set -- changes it
	i=$((i + 1))
	[ $i -ne 1 ] || set --
	[ $i -eq "$cmdi" ] || set -- "$@" "$a"
done
case "$cmd" in
join) do_join "$@" ;;
reset) do_reset "$@" ;;
version)
	case " $* " in
	*short*) echo "v1.31.0" ;;
	*) echo 'kubeadm version: &version.Info{Major:"1", Minor:"31", GitVersion:"v1.31.0"}' ;;
	esac ;;
*) fail "unknown command \"$cmd\" for \"kubeadm\" (the simulated kubeadm supports join, reset, version)" ;;
esac
