#!/usr/bin/env bash
# Deploy the CDK app to a running LocalStack and print the API URL.
# Run through `make localstack-deploy` (which builds the functions first);
# extra arguments go to `cdklocal deploy` (e.g. -c jwtIssuer=…).
# See localstack/README.md for the traps.
set -euo pipefail
cd "$(dirname "$0")/.."

CDKLOCAL=${CDKLOCAL:-node_modules/.bin/cdklocal}
CDK_ENV=${CDK_ENV:-JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 CDK_DISABLE_CLI_TELEMETRY=true}
LAMBDA_ARCH=${LAMBDA_ARCH:-arm64}
ENDPOINT=${AWS_ENDPOINT_URL:-http://localhost:4566}
REGION=${AWS_DEFAULT_REGION:-us-east-1}
ACCOUNT=000000000000
STAGE=build/.localstack # asset root: each function's bootstrap plus the dev policy

if ! curl -fsS "$ENDPOINT/_localstack/health" >/dev/null; then
  echo "LocalStack is not answering on $ENDPOINT: start it with 'docker compose -f localstack/docker-compose.yml up -d'" >&2
  exit 1
fi

# The functions must match the architecture LocalStack runs them on.
want=$([ "$LAMBDA_ARCH" = x86_64 ] && echo 3e || echo b7) # ELF e_machine: x86-64, AArch64
rm -rf "$STAGE" && mkdir -p "$STAGE"
for boot in build/*/bootstrap; do
  fn=$(basename "$(dirname "$boot")")
  got=$(od -An -tx1 -j18 -N1 "$boot" | tr -d ' ')
  if [ "$got" != "$want" ]; then
    echo "$boot is not built for $LAMBDA_ARCH (the root 'build' target must honour LAMBDA_GOARCH)" >&2
    exit 1
  fi
  mkdir -p "$STAGE/$fn"
  cp "$boot" "$STAGE/$fn/bootstrap"
  # No Better IAM service locally: the embedded policy, read from the bundle.
  cp localstack/policy.json "$STAGE/$fn/policy.json"
done

export AWS_ENVAR_ALLOWLIST=AWS_REGION,AWS_DEFAULT_REGION AWS_REGION=$REGION AWS_DEFAULT_REGION=$REGION
env $CDK_ENV "$CDKLOCAL" bootstrap "aws://$ACCOUNT/$REGION"
env $CDK_ENV "$CDKLOCAL" deploy --require-approval never --outputs-file "$STAGE/outputs.json" \
  -c assetRoot="$STAGE" -c policyFile=/var/task/policy.json -c iamUrl= \
  -c lambdaArchitecture="$LAMBDA_ARCH" -c removalPolicy=destroy \
  -c releasePinsFile=localstack/dev-release-pins.pem "$@"

# CloudFormation reports the AWS form of the URL; LocalStack serves the API on
# its own host name.
api=$(node -p 'const o = require("./'"$STAGE"'/outputs.json"); Object.values(o)[0].ApiUrl')
id=$(echo "$api" | sed -E 's#^https?://([^.]+)\.execute-api\..*#\1#')
echo
echo "BC_API_URL=http://$id.execute-api.localhost.localstack.cloud:4566/"
echo "run the end-to-end suite: make e2e BC_API_URL=http://$id.execute-api.localhost.localstack.cloud:4566/ BC_TOKEN=<a JWT from -c jwtIssuer>"
