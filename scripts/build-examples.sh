#!/usr/bin/env bash
# Builds the example support agent's components from source into examples/agents/support/:
# tools/orders.wasm (lookup_order), tools/payments.wasm (create_refund) and agent.wasm (the
# options factory). The built files are not committed.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
cargo build --locked --target wasm32-wasip2 --profile guest --target-dir target/guests \
  -p tollgate-example-orders -p tollgate-example-payments -p tollgate-example-support-factory
out=target/guests/wasm32-wasip2/guest
agent=examples/agents/support
mkdir -p "$agent/tools"
cp "$out/tollgate_example_orders.wasm" "$agent/tools/orders.wasm"
cp "$out/tollgate_example_payments.wasm" "$agent/tools/payments.wasm"
cp "$out/tollgate_example_support_factory.wasm" "$agent/agent.wasm"
echo "built $agent/tools/orders.wasm, $agent/tools/payments.wasm and $agent/agent.wasm"
