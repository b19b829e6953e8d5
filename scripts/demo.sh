#!/usr/bin/env bash
# The demo, offline: builds the example support agent from source and drives its tools through the
# sandbox as the Worker will: the read tool inline, the refund as a deferred call whose idempotency
# key reaches a (local, throwaway) payments service.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build-examples.sh
cargo build --locked --quiet -p tollgate
tollgate=target/debug/tollgate
agent=examples/agents/support

# A stand-in payments service on loopback that prints what it receives.
port_file=$(mktemp)
python3 - "$port_file" <<'PY' &
import http.server, json, sys
class Payments(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        key = self.headers["idempotency-key"]
        print(f"  [payments] POST {self.path} Idempotency-Key={key} {json.dumps(body)}", flush=True)
        answer = json.dumps({"refund_id": "rf_demo_1", "status": "succeeded", "amount_cents": body["amount_cents"]}).encode()
        self.send_response(201); self.send_header("content-length", str(len(answer))); self.end_headers()
        self.wfile.write(answer)
    def log_message(self, *args): pass
server = http.server.HTTPServer(("127.0.0.1", 0), Payments)
open(sys.argv[1], "w").write(str(server.server_port))
server.serve_forever()
PY
payments=$!
trap 'kill $payments 2>/dev/null || true; rm -f "$port_file"' EXIT
for _ in $(seq 50); do [ -s "$port_file" ] && break; sleep 0.1; done
export PAYMENTS_URL="http://127.0.0.1:$(cat "$port_file")"

echo "== tollgate tools check $agent"
$tollgate tools check "$agent"
echo
echo "== tollgate tools list $agent"
$tollgate tools list "$agent"
echo
echo "== lookup_order runs inline (read-only)"
$tollgate tools call "$agent" lookup_order '{"order_id":"7"}'
echo
echo "== create_refund runs as attempt 1 of a deferred call, with its idempotency key"
$tollgate tools call "$agent" create_refund '{"order_id":"7","amount_cents":4200,"reason":"arrived broken"}' \
  --attempt 1 --idempotency-key session-demo/turn-1/toolu_01
echo
echo "== arguments that fail the schema never reach the tool"
$tollgate tools call "$agent" create_refund '{"order_id":"7","amount_cents":0}' --attempt 1 || true
