#!/bin/sh
# LocalStack ready hook: create Signet's tables and queues from template.yaml.
set -eu
if [ ! -x /opt/signet/signet ]; then
  echo "signet: /opt/signet/signet missing; run 'make localstack-up' (it builds the binary)" >&2
  exit 1
fi
/opt/signet/signet provision --endpoint http://localhost:4566 --prefix "${SIGNET_PREFIX:-signet-local}"
