#!/usr/bin/env bash
# Schema-driven fuzz of the HTTP alerts API: starts `signet local` on spare
# ports, creates an app, and runs schemathesis against docs/openapi.yaml with
# the app key and with the admin key. Fails on any 5xx (not_a_server_error)
# or on a response that does not match the document.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-.tools/venv}
examples=${FUZZ_EXAMPLES:-40}
ws=127.0.0.1:${FUZZ_WS_PORT:-3101}
api=127.0.0.1:${FUZZ_HTTP_PORT:-3100}
bin=$(mktemp -d)/signet
go build -o "$bin" ./cmd/signet
"$bin" local --addr "$ws" --http-addr "$api" --dynamodb-addr 127.0.0.1:0 --sqs-addr 127.0.0.1:0 --quiet > .tools/fuzz-local.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -s -o /dev/null "http://$api/v1/apps" && break; sleep 0.1; done
key=$("$bin" apps create --name fuzz --allow-user '*' --allow-group '*' --rate 100000 --api "http://$api" 2>/dev/null)
export SCHEMATHESIS_TELEMETRY=false
for who in app admin; do
  if [ "$who" = app ]; then auth=$key; else auth=local-admin-key; fi
  echo "== schemathesis with the $who key"
  "$venv/bin/schemathesis" run docs/openapi.yaml --url "http://$api" \
    -H "Authorization: Bearer $auth" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
    --max-examples "$examples" --generation-deterministic --request-timeout 10
done
# The local stack enforces each function's template IAM policy: a call the
# template does not grant shows as "IAM DENIED" and fails the run too.
if grep -q "IAM DENIED" .tools/fuzz-local.log; then
  echo "FAIL: the alerts API made AWS calls its template policy does not allow:"
  grep "IAM DENIED" .tools/fuzz-local.log | head -20
  exit 1
fi
