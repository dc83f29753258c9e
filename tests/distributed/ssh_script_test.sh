#!/usr/bin/env bash
# scripts/start_cluster_ssh.sh end to end on this machine: "ssh" is replaced
# by a local shell (the hosts are 127.0.0.1), so the script's TF_CONFIG,
# quoting, start and wait logic run for real. Usage: ssh_script_test.sh TG_TRAIN SCRIPT
set -euo pipefail
tg_train="$1" script="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
read -r p1 p2 p3 < <(python3 -c '
import socket
s=[socket.socket() for _ in range(3)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
cat > "$work/local_ssh" <<'SH'
#!/usr/bin/env bash
# ssh HOST COMMAND, run here
exec bash -c "$2"
SH
chmod +x "$work/local_ssh"
bash "$script" --ssh "$work/local_ssh" --ps "127.0.0.1:$p1" --chief "127.0.0.1:$p2" --workers "127.0.0.1:$p3" \
  --tg_train "$tg_train" --log_dir "$work/logs" -- \
  --net=lenet --dataset_name=synthetic --synthetic_examples=256 --batch_size=8 --max_steps=5 --grad_bits=2 \
  --threads=1 --quiet=true --peer_timeout_secs=20 --train_dir="$work/run"
grep -q '"steps": 5' "$work/run/result.json" || { echo "no result.json from the chief"; cat "$work"/logs/*.log; exit 1; }
grep -q "joined" "$work/logs/ps-0.log" || { echo "ps log lacks the joins"; cat "$work/logs/ps-0.log"; exit 1; }
# Every task had its own secret file (0600) and the ps refused nobody: the
# keys the script derived with openssl are the ones the ps derives.
for f in ps-0 chief-0 worker-0; do
  [[ $(stat -c %a "$work/logs/$f.secret") == 600 ]] || { echo "$f.secret is not mode 600"; exit 1; }
done
grep -q "terngrad-secret v1 replica 1 " "$work/logs/worker-0.secret" || { echo "worker 0 did not get replica 1's key"; exit 1; }
if grep -q "refused\|WITHOUT a cluster secret" "$work/logs/ps-0.log"; then echo "the ps refused a task or ran open"; cat "$work/logs/ps-0.log"; exit 1; fi
# A bad option is refused.
if bash "$script" --bogus 2>/dev/null; then echo "bad option accepted"; exit 1; fi
echo "start_cluster_ssh.sh: 3 tasks over (local) ssh finished, result.json written"
