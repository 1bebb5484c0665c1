# Infrastructure targets, included by the root Makefile (-include infra/infra.mk).
# The CDK app lives in infra/ (its own Go module); cdk.json at the root builds
# it to build/infra-app and runs that. See docs/infrastructure.md.

# Two niced lanes of make test (`--niced` starts the next): the CDK tests,
# and the synthesis that make lambda-test (appended to this lane) reads.
INFRA_TEST_TARGETS += infra-test --niced synth

CDK      := node_modules/.bin/cdk
CDKLOCAL := node_modules/.bin/cdklocal
# Node 20 is what this machine has: silence the jsii kernel's end-of-life banner
# (the variable must be set before the app starts) and keep the CLI quiet.
CDK_ENV  := JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 CDK_DISABLE_CLI_TELEMETRY=true
# Extra CDK CLI arguments, e.g. CDK_ARGS='-c jwtIssuer=https://… -c iamUrl=https://…'.
# They reach the recipes through the environment and the shell splits them on
# any whitespace, so a value pasted over several lines passes every line: a
# newline in $(CDK_ARGS) written into a recipe would end the command there.
CDK_ARGS ?=
export CDK_ARGS
# Where make synth writes the cloud assembly (the infra tests synthesize the
# docs' deploy lines into a temporary folder, leaving cdk.out/ alone).
CDK_OUT  ?= cdk.out

# Synthesis never needs credentials: hide any the caller has so the CLI does
# not try to resolve an account (no network, no metadata service).
CDK_OFFLINE := env -u AWS_PROFILE -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN \
	AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true

# LocalStack runs Lambdas in containers of the host's architecture unless it
# emulates; default to the host's (arm64 hosts: arm64, amd64 hosts: x86_64).
LOCALSTACK_LAMBDA_ARCH ?= $(if $(filter aarch64 arm64,$(shell uname -m)),arm64,x86_64)

.PHONY: infra-test synth deploy aws-credentials bootstrap localstack-deploy

infra-test: tools ## gofmt, vet, the CDK assertions, the cdk-nag rule packs and the CloudFormation schema check (offline)
	@out=$$(gofmt -l infra); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	cd infra && $(GO) vet ./... && $(CDK_ENV) $(GO) test -vet=off ./...

synth: tools ## synthesize the CloudFormation template into cdk.out (CDK_OUT=dir: elsewhere; offline; placeholder bootstraps if build/ is incomplete)
	set -f; $(CDK_OFFLINE) $(CDK_ENV) $(CDK) synth --quiet --output $(CDK_OUT) -c placeholderAssets=auto $$CDK_ARGS

# make deploy checks for credentials before it builds (a minute), and tells
# the app it deploys: it refuses cdk.json's placeholder jwtIssuer and iamUrl.
# DEPLOY_BUILD= (empty) deploys what LAMBDA_OUT holds without building it
# first: the infra tests run the README's deploy block that way, on
# placeholder bootstraps (make build is tested on its own).
DEPLOY_BUILD ?= build
deploy: tools aws-credentials $(DEPLOY_BUILD) ## check AWS credentials, build the functions, then cdk deploy to that account
	set -f; $(CDK_ENV) $(CDK) deploy --output $(CDK_OUT) --outputs-file build/outputs.json -c deploying=true -c assetRoot=$(LAMBDA_OUT) $$CDK_ARGS

# Credentials the SDK would find (no network: whether they are valid is
# the deploy's first call to tell).
aws-credentials:
	@[ -n "$${AWS_ACCESS_KEY_ID:-}$${AWS_PROFILE:-}$${AWS_WEB_IDENTITY_TOKEN_FILE:-}$${AWS_CONTAINER_CREDENTIALS_FULL_URI:-}$${AWS_CONTAINER_CREDENTIALS_RELATIVE_URI:-}" ] || \
	  [ -s "$${AWS_SHARED_CREDENTIALS_FILE:-$$HOME/.aws/credentials}" ] || [ -s "$${AWS_CONFIG_FILE:-$$HOME/.aws/config}" ] || \
	  { echo "make deploy: no AWS credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID, ~/.aws/credentials or ~/.aws/config): nothing built or deployed" >&2; exit 1; }

# make bootstrap ENV=aws://ACCOUNT/REGION: the CDK's staging bucket and roles,
# once per account and region. The app is synthesized with placeholder
# bootstraps: bootstrapping deploys none of its functions.
bootstrap: tools aws-credentials ## cdk bootstrap ENV=aws://ACCOUNT/REGION (once per account and region; needs no make build)
	@[ -n "$(ENV)" ] || { echo "make bootstrap: give ENV=aws://ACCOUNT/REGION" >&2; exit 2; }
	set -f; $(CDK_ENV) $(CDK) bootstrap --output $(CDK_OUT) -c placeholderAssets=auto $$CDK_ARGS $(ENV)

localstack-deploy: tools ## build for LocalStack's architecture, cdklocal bootstrap + deploy, print the API URL
	$(MAKE) build LAMBDA_GOARCH=$(if $(filter x86_64,$(LOCALSTACK_LAMBDA_ARCH)),amd64,arm64)
	LAMBDA_ARCH=$(LOCALSTACK_LAMBDA_ARCH) CDK_ENV='$(CDK_ENV)' CDKLOCAL=$(CDKLOCAL) localstack/deploy.sh $$CDK_ARGS
