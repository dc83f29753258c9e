#!/usr/bin/env bash
# Starts one distributed tg-train run across several hosts over ssh: every
# task gets the same tg-train flags and its own TF_CONFIG, the way a TFJob
# operator would start it. Each task's output goes to <log_dir>/<task>.log on
# its host; the script waits for every task and exits non-zero if any failed.
#
#   scripts/start_cluster_ssh.sh \
#       --ps "10.0.0.1:2222" \
#       --chief "10.0.0.2:2222" \
#       --workers "10.0.0.3:2222,10.0.0.4:2222" \
#       [--evaluator "10.0.0.5:2222"] \
#       [--tg_train /opt/terngrad/bin/tg-train] [--log_dir /tmp/tg-logs] [--ssh "ssh -p 2200"] [--dry_run] \
#       -- --net=lenet --grad_bits=2 --max_steps=10000 --train_dir=/shared/run1
#
# Requirements: passwordless ssh to every host, tg-train at the same path on
# each (build it there: -march=native binaries do not move between CPUs), the
# data at the same --data_dir, and --train_dir on storage the chief, the
# evaluator and (to resume) every worker share (NFS). The ps and replica ports
# must be reachable between the hosts. Ctrl-C stops every task.
#
# Authentication: the script makes a fresh cluster secret for the run (or
# reads --secret_file, a file "terngrad-secret v1 cluster <hex>") and sends
# each task its file over ssh's stdin, never on a command line: the ps tasks
# get the cluster secret, the chief, each worker and the evaluator only their
# own role's key, HMAC-SHA256(secret, "terngrad/v1/role/<role>")
# (comm/credentials.h), in <log_dir>/<task>.secret (mode 0600) on its host.
# Needs openssl here. For TLS, pass --tls_* flags to tg-train after --.
set -euo pipefail

ps="" chief="" workers="" evaluator="" tg_train="tg-train" log_dir="/tmp/tg-logs" dry_run=0 secret_file=""
ssh_cmd="ssh -o BatchMode=yes"
while (($#)); do
  case "$1" in
    --ps) ps="$2"; shift 2 ;;
    --chief) chief="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --evaluator) evaluator="$2"; shift 2 ;;
    --tg_train) tg_train="$2"; shift 2 ;;
    --log_dir) log_dir="$2"; shift 2 ;;
    --ssh) ssh_cmd="$2"; shift 2 ;;
    --dry_run) dry_run=1; shift ;;
    --secret_file) secret_file="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "start_cluster_ssh: unknown option $1 (tg-train flags go after --)" >&2; exit 2 ;;
  esac
done
[[ -n "$ps" ]] || { echo "start_cluster_ssh: --ps is required" >&2; exit 2; }
[[ -n "$chief$workers" ]] || { echo "start_cluster_ssh: give --chief and/or --workers" >&2; exit 2; }

json_list() {  # "a:1,b:2" -> ["a:1", "b:2"]
  local IFS=, out="" x
  for x in $1; do out+="${out:+, }\"$x\""; done
  echo "[$out]"
}
cluster="{\"ps\": $(json_list "$ps")"
[[ -n "$chief" ]] && cluster+=", \"chief\": $(json_list "$chief")"
[[ -n "$workers" ]] && cluster+=", \"worker\": $(json_list "$workers")"
[[ -n "$evaluator" ]] && cluster+=", \"evaluator\": $(json_list "$evaluator")"
cluster+="}"

# The run's cluster secret (64 hex digits) and each role's key.
if [[ -n "$secret_file" ]]; then
  read -r w1 w2 w3 secret rest < "$secret_file" || true
  [[ "$w1 $w2 $w3" == "terngrad-secret v1 cluster" && "$secret" =~ ^[0-9a-fA-F]{64}$ && -z "${rest:-}" ]] ||
    { echo "start_cluster_ssh: $secret_file is not a cluster secret file (terngrad-secret v1 cluster <64 hex digits>)" >&2; exit 2; }
else
  secret=$(openssl rand -hex 32)
fi
role_key() {  # role -> 64 hex digits
  printf '%s' "terngrad/v1/role/$1" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$secret" | awk '{print $NF}'
}
secret_line() {  # type index -> the line the task's secret file holds
  case "$1" in
    ps) echo "terngrad-secret v1 cluster $secret" ;;
    chief) echo "terngrad-secret v1 replica 0 $(role_key replica.0)" ;;
    worker) local r=$2; [[ -n "$chief" ]] && r=$((r + 1)); echo "terngrad-secret v1 replica $r $(role_key "replica.$r")" ;;
    evaluator) echo "terngrad-secret v1 observer $(role_key observer)" ;;
  esac
}

quote() { printf '%q ' "$@"; }
flags=$(quote "$@")
pids=() names=()
start() {  # type index host:port
  local type="$1" index="$2" addr="$3" host
  host="${addr%:*}"; host="${host#[}"; host="${host%]}"
  local tf="{\"cluster\": $cluster, \"task\": {\"type\": \"$type\", \"index\": $index}}"
  local key_file="$log_dir/$type-$index.secret"
  local cmd="mkdir -p $(quote "$log_dir") && TF_CONFIG=$(quote "$tf") $(quote "$tg_train") $flags --secret_file=$(quote "$key_file") > $(quote "$log_dir/$type-$index.log") 2>&1"
  if ((dry_run)); then echo "$ssh_cmd $host $cmd"; return; fi
  # The task's secret travels on ssh's stdin, not in its command line.
  secret_line "$type" "$index" |
    $ssh_cmd "$host" "umask 077 && mkdir -p $(quote "$log_dir") && cat > $(quote "$key_file.tmp") && mv $(quote "$key_file.tmp") $(quote "$key_file")" ||
    { echo "start_cluster_ssh: cannot write $key_file on $host" >&2; exit 1; }
  $ssh_cmd "$host" "$cmd" &
  pids+=($!) names+=("$type $index on $host")
}
i=0; IFS=, read -ra list <<<"$ps"; for a in "${list[@]}"; do start ps $i "$a"; i=$((i+1)); done
[[ -n "$chief" ]] && start chief 0 "$chief"
i=0; if [[ -n "$workers" ]]; then IFS=, read -ra list <<<"$workers"; for a in "${list[@]}"; do start worker $i "$a"; i=$((i+1)); done; fi
[[ -n "$evaluator" ]] && start evaluator 0 "$evaluator"
((dry_run)) && exit 0

trap 'echo "start_cluster_ssh: stopping"; kill "${pids[@]}" 2>/dev/null; exit 130' INT TERM
status=0
for k in "${!pids[@]}"; do
  if ! wait "${pids[$k]}"; then
    echo "start_cluster_ssh: ${names[$k]} failed (see $log_dir on that host)" >&2
    status=1
  fi
done
exit $status
