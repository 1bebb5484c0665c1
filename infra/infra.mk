# Infrastructure targets, included by the root Makefile (-include infra/infra.mk).
# The CDK app lives in infra/ (its own Go module); cdk.json at the root builds
# it to build/infra-app and runs that. See docs/infrastructure.md.

INFRA_TEST_TARGETS += infra-test synth

CDK      := node_modules/.bin/cdk
CDKLOCAL := node_modules/.bin/cdklocal
# Node 20 is what this machine has: silence the jsii kernel's end-of-life banner
# (the variable must be set before the app starts) and keep the CLI quiet.
CDK_ENV  := JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 CDK_DISABLE_CLI_TELEMETRY=true
# Extra CDK CLI arguments, e.g. CDK_ARGS='-c jwtIssuer=https://… -c iamUrl=https://…'.
CDK_ARGS ?=
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

.PHONY: infra-test synth deploy localstack-deploy

infra-test: tools ## gofmt, vet, the CDK assertions, the cdk-nag rule packs and the CloudFormation schema check (offline)
	@out=$$(gofmt -l infra); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	cd infra && $(GO) vet ./... && $(CDK_ENV) $(GO) test ./...

synth: tools ## synthesize the CloudFormation template into cdk.out (CDK_OUT=dir: elsewhere; offline; placeholder bootstraps if build/ is incomplete)
	$(CDK_OFFLINE) $(CDK_ENV) $(CDK) synth --quiet --output $(CDK_OUT) -c placeholderAssets=auto $(CDK_ARGS)

deploy: tools build ## build the functions, then cdk deploy to the account of the current AWS credentials
	$(CDK_ENV) $(CDK) deploy --outputs-file build/outputs.json $(CDK_ARGS)

localstack-deploy: tools ## build for LocalStack's architecture, cdklocal bootstrap + deploy, print the API URL
	$(MAKE) build LAMBDA_GOARCH=$(if $(filter x86_64,$(LOCALSTACK_LAMBDA_ARCH)),amd64,arm64)
	LAMBDA_ARCH=$(LOCALSTACK_LAMBDA_ARCH) CDK_ENV='$(CDK_ENV)' CDKLOCAL=$(CDKLOCAL) localstack/deploy.sh $(CDK_ARGS)
