// Package stack is the Better Compute CDK stack, built from the method
// catalog: one Lambda and one HTTP route per method, the reconciler on a
// schedule, the single table, the KMS keys, and the alarms that watch them.
package stack

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/bettercompute/control-plane/shared/api"
)

// Stack is the synthesized stack and the resources tests look up.
type Stack struct {
	Stack      awscdk.Stack
	Table      awsdynamodb.Table
	TableKey   awskms.Key
	SigningKey awskms.Key
	LogKey     awskms.Key // signs the release log's checkpoints
	CursorKey  awssecretsmanager.Secret
	API        awsapigatewayv2.HttpApi
	Stage      awsapigatewayv2.HttpStage
	DLQ        awssqs.Queue // the reconciler schedule's dead-letter queue
	AlarmDLQ   awssqs.Queue // the alarm e-mail subscription's (nil without alarmEmail)
	Schedule   awsevents.Rule
	// Lambdas by function name (catalog FunctionName, and "reconciler").
	Lambdas map[string]awslambda.Function
	Roles   map[string]awsiam.Role
}

// Output names.
const (
	OutputAPIURL       = "ApiUrl"
	OutputTableName    = "TableName"
	OutputSigningKeyID = "SigningKeyId"
	OutputLogKeyID     = "ReleaseLogKeyId"
	// OutputLogOrigin and OutputLogVerifierKeyCommand: what an auditor pins
	// the release log's key from.
	OutputLogOrigin             = "ReleaseLogOrigin"
	OutputLogVerifierKeyCommand = "ReleaseLogVerifierKeyCommand"
)

// Environment variables the stack sets (read by shared/app.ConfigFromEnv).
const (
	envTable            = "BC_TABLE"
	envLogLevel         = "BC_LOG_LEVEL"
	envCursorSecret     = "BC_CURSOR_SECRET_ARN"
	envIAMURL           = "BC_IAM_URL"
	envPolicyFile       = "BC_POLICY_FILE"
	envReleaseKMSKeys   = "BC_RELEASE_KMS_KEYS"
	envReleasePins      = "BC_RELEASE_PINS"
	envReleaseThreshold = "BC_RELEASE_THRESHOLD"
	envReleaseLogKey    = "BC_RELEASE_LOG_KEY"
	envReleaseLogOrigin = "BC_RELEASE_LOG_ORIGIN"
)

// New builds the stack from the catalog and cfg.
func New(scope constructs.Construct, cfg Config, props *awscdk.StackProps) (*Stack, error) {
	fns, err := Functions()
	if err != nil {
		return nil, err
	}
	if err := checkAssets(cfg.AssetRoot); err != nil {
		return nil, err
	}
	if props == nil {
		props = &awscdk.StackProps{}
	}
	if props.Description == nil {
		props.Description = jsii.String("Better Compute control plane: one Lambda per API method behind an HTTP API, the reservation reconciler, one DynamoDB table, KMS keys.")
	}
	s := &Stack{
		Stack:   awscdk.NewStack(scope, jsii.String(cfg.StackName), props),
		Lambdas: map[string]awslambda.Function{},
		Roles:   map[string]awsiam.Role{},
	}
	awscdk.Tags_Of(s.Stack).Add(jsii.String("project"), jsii.String("better-compute"), nil)
	stateful := awscdk.RemovalPolicy_RETAIN
	if cfg.Destroy {
		stateful = awscdk.RemovalPolicy_DESTROY
	}

	s.TableKey = awskms.NewKey(s.Stack, jsii.String("TableKey"), &awskms.KeyProps{
		Description:       jsii.String("Better Compute: encrypts the control plane's DynamoDB table"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     stateful,
		PendingWindow:     pendingWindow(cfg),
	})
	s.TableKey.AddToResourcePolicy(grantGuard(), nil)
	s.SigningKey = awskms.NewKey(s.Stack, jsii.String("ReleaseSigningKey"), &awskms.KeyProps{
		Description:   jsii.String("Better Compute: signs bcd release manifests (operators sign with the CLI; functions only read the public key)"),
		KeySpec:       awskms.KeySpec_ECC_NIST_P256,
		KeyUsage:      awskms.KeyUsage_SIGN_VERIFY,
		Policy:        signingKeyPolicy(s.Stack, cfg),
		RemovalPolicy: stateful,
		PendingWindow: pendingWindow(cfg),
	})
	s.LogKey = awskms.NewKey(s.Stack, jsii.String("ReleaseLogKey"), &awskms.KeyProps{
		Description:   jsii.String("Better Compute: signs the release log's checkpoints (only the functions that append may sign; anyone in the account may read the public key)"),
		KeySpec:       awskms.KeySpec_ECC_NIST_P256,
		KeyUsage:      awskms.KeyUsage_SIGN_VERIFY,
		Policy:        logKeyPolicy(cfg),
		RemovalPolicy: stateful,
		PendingWindow: pendingWindow(cfg),
	})
	if s.Table, err = newTable(s, s.TableKey, stateful, !cfg.Destroy); err != nil {
		return nil, err
	}
	// Pagination cursors are HMAC'd with this key. The functions that page
	// read it at cold start (BC_CURSOR_SECRET_ARN, GetSecretValue granted to
	// them alone): neither the template nor any environment holds the value.
	s.CursorKey = awssecretsmanager.NewSecret(s.Stack, jsii.String("CursorKey"), &awssecretsmanager.SecretProps{
		Description: jsii.String("Better Compute: HMAC key of pagination cursors (read by the list functions through BC_CURSOR_SECRET_ARN)"),
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength: jsii.Number(64), ExcludePunctuation: jsii.Bool(true),
		},
	})

	s.DLQ = newDLQ(s.Stack, "ReconcilerDLQ")

	common := map[string]*string{
		envTable:    s.Table.TableName(),
		envLogLevel: jsii.String(cfg.LogLevel),
	}
	if cfg.IAMURL != "" {
		common[envIAMURL] = jsii.String(cfg.IAMURL)
	} else {
		common[envPolicyFile] = jsii.String(cfg.PolicyFile)
	}

	arch := awslambda.Architecture_ARM_64()
	if cfg.Architecture == ArchX86 {
		arch = awslambda.Architecture_X86_64()
	}
	for _, f := range fns {
		env := map[string]*string{}
		for k, v := range common {
			env[k] = v
		}
		if len(f.Access.CursorKey) > 0 {
			env[envCursorSecret] = s.CursorKey.SecretArn()
		}
		if f.VerifiesReleases() {
			env[envReleaseKMSKeys] = s.SigningKey.KeyId()
			env[envReleaseThreshold] = jsii.String(strconv.Itoa(cfg.ReleaseThreshold))
			if cfg.ReleasePins != "" {
				env[envReleasePins] = jsii.String(cfg.ReleasePins)
			}
		}
		if len(f.Access.LogKey) > 0 {
			env[envReleaseLogKey] = s.LogKey.KeyId()
			env[envReleaseLogOrigin] = logOrigin(s.Stack)
		}
		if f.IsConsole() {
			for k, v := range consoleEnv(cfg) {
				env[k] = jsii.String(v)
			}
		}
		s.addFunction(f, cfg, arch, env, stateful)
	}

	s.addAPI(cfg, fns, stateful)
	s.addSchedule()
	s.addObservability(cfg, fns)
	s.applyRulePacks(cfg, fns)

	awscdk.NewCfnOutput(s.Stack, jsii.String(OutputAPIURL), &awscdk.CfnOutputProps{
		Value: s.Stage.Url(), Description: jsii.String("Base URL of the API (POST <url>api/compute/<resource>/<method>)"),
	})
	awscdk.NewCfnOutput(s.Stack, jsii.String(OutputTableName), &awscdk.CfnOutputProps{
		Value: s.Table.TableName(), Description: jsii.String("The control plane's DynamoDB table"),
	})
	awscdk.NewCfnOutput(s.Stack, jsii.String(OutputSigningKeyID), &awscdk.CfnOutputProps{
		Value: s.SigningKey.KeyId(), Description: jsii.String("KMS key that signs release manifests (ECC_NIST_P256; pinned through BC_RELEASE_KMS_KEYS)"),
	})
	awscdk.NewCfnOutput(s.Stack, jsii.String(OutputLogKeyID), &awscdk.CfnOutputProps{
		Value: s.LogKey.KeyId(), Description: jsii.String("KMS key that signs the release log's checkpoints (its public key is what nodes and monitors pin)"),
	})
	// The verifier key hashes the public key (its key ID), which no
	// template function can: the outputs name the key and the origin, and
	// the command that prints the verifier key from them.
	awscdk.NewCfnOutput(s.Stack, jsii.String(OutputLogOrigin), &awscdk.CfnOutputProps{
		Value: logOrigin(s.Stack), Description: jsii.String("The release log's origin: the checkpoints' first line and the verifier key's name"),
	})
	awscdk.NewCfnOutput(s.Stack, jsii.String(OutputLogVerifierKeyCommand), &awscdk.CfnOutputProps{
		Value:       awscdk.Fn_Join(jsii.String(""), jsii.Strings("bcctl pubkey --kms-key ", *s.LogKey.KeyArn(), " --log-origin ", *logOrigin(s.Stack))),
		Description: jsii.String("Prints the release log's verifier key (kms:GetPublicKey on the log key): what auditors, monitors and nodes pin"),
	})
	return s, nil
}

// logOrigin names the release log after the stack (a plain string in the
// template: nodes and monitors pin it next to the log key).
func logOrigin(stack awscdk.Stack) *string {
	return jsii.String("bettercompute/" + *stack.StackName() + "/releases")
}

// logKeyPolicy is the release log key's whole policy: administration as
// the release key's (never Sign), the account reads the public key, and
// kms:Sign is added per function that appends (addFunction) — no one else
// may sign a checkpoint.
func logKeyPolicy(cfg Config) awsiam.PolicyDocument {
	statements := signKeyBase(cfg)
	return awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{Statements: &statements})
}

// signKeyBase are the statements both signing keys' policies start with:
// administration (never use), the account reads the public key, and the
// CreateGrant guard.
func signKeyBase(cfg Config) []awsiam.PolicyStatement {
	account := awsiam.NewAccountRootPrincipal()
	var admin awsiam.IPrincipal = account
	if cfg.ReleaseKeyAdminRole != "" {
		admin = awsiam.NewArnPrincipal(jsii.String(cfg.ReleaseKeyAdminRole))
	}
	return []awsiam.PolicyStatement{
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String("KeyAdministration"), Principals: &[]awsiam.IPrincipal{admin},
			Actions: jsii.Strings(keyAdministration...), Resources: jsii.Strings("*"),
		}),
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String("AccountReadsThePublicKey"), Principals: &[]awsiam.IPrincipal{account},
			Actions: jsii.Strings("kms:GetPublicKey", "kms:DescribeKey"), Resources: jsii.Strings("*"),
		}),
		grantGuard(),
	}
}

// newDLQ is a dead-letter queue: SQS-managed encryption, TLS only, and
// messages kept 14 days (SQS's longest).
func newDLQ(scope constructs.Construct, id string) awssqs.Queue {
	return awssqs.NewQueue(scope, jsii.String(id), &awssqs.QueueProps{
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
	})
}

func pendingWindow(cfg Config) awscdk.Duration {
	if cfg.Destroy {
		return awscdk.Duration_Days(jsii.Number(7)) // the shortest KMS allows
	}
	return awscdk.Duration_Days(jsii.Number(30))
}

// addFunction creates the function, its log group and its role with exactly
// the statements its Access allows.
func (s *Stack) addFunction(f Function, cfg Config, arch awslambda.Architecture, env map[string]*string, stateful awscdk.RemovalPolicy) {
	scope := constructs.NewConstruct(s.Stack, jsii.String(f.Name))
	awscdk.Tags_Of(scope).Add(jsii.String(api.TagFunction), jsii.String(f.Name), nil)

	logs := awslogs.NewLogGroup(scope, jsii.String("Logs"), &awslogs.LogGroupProps{
		Retention:     retentionDays[cfg.LogRetentionDays],
		RemovalPolicy: stateful,
	})
	role := awsiam.NewRole(scope, jsii.String("Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("Better Compute " + f.Name + ": only the actions it declares (catalog Actions)"),
	})
	logs.GrantWrite(role)
	for _, st := range s.statements(f.Access) {
		role.AddToPolicy(st)
	}
	if len(f.Access.LogKey) > 0 {
		s.LogKey.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String("SignCheckpoints" + strings.ReplaceAll(f.Name, "-", "")), Principals: &[]awsiam.IPrincipal{role},
			Actions: jsii.Strings(f.Access.LogKey...), Resources: jsii.Strings("*"),
			Conditions: &map[string]any{"StringEquals": map[string]any{"kms:SigningAlgorithm": "ECDSA_SHA_256"}},
		}), nil)
	}

	desc := "Better Compute reconciler: drives reservations through their states (capacity.reservations)"
	if f.IsConsole() {
		desc = "Better Compute web console (GET /console/…): pages built from the API's methods with the viewer's token"
	}
	if f.Method != nil {
		desc = fmt.Sprintf("Better Compute %s (POST %s)", f.Method.Name, f.Method.Path())
		if len(f.Method.Actions) == 0 {
			awscdk.Annotations_Of(scope).AddWarningV2(jsii.String("bettercompute:no-actions"),
				jsii.String("method "+f.Method.Name+" declares no AWS actions in the catalog: its function cannot reach the table"), nil)
		}
	}
	props := &awslambda.FunctionProps{
		Description:  jsii.String(desc),
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: arch,
		Handler:      jsii.String("bootstrap"),
		Code:         awslambda.Code_FromAsset(jsii.String(filepath.Join(cfg.AssetRoot, f.Name)), nil),
		MemorySize:   jsii.Number(f.Memory),
		Timeout:      awscdk.Duration_Seconds(jsii.Number(f.Timeout)),
		Environment:  &env,
		Role:         role,
		LogGroup:     logs,
		// JSON: the platform's lines (START, REPORT with the init duration, …)
		// are JSON objects like the function's own, and Lambda filters the
		// function's lines by their "level" at logLevel.
		LoggingFormat:         awslambda.LoggingFormat_JSON,
		ApplicationLogLevelV2: applicationLogLevels[cfg.LogLevel],
		SystemLogLevelV2:      awslambda.SystemLogLevel_INFO,
		// Lambda's own segments (init, invocation, overhead) per request.
		Tracing: awslambda.Tracing_ACTIVE,
	}
	if f.IsReconciler() {
		// EventBridge invokes asynchronously; the next tick is the retry, so
		// Lambda does not retry a failed pass (passes are idempotent).
		props.RetryAttempts = jsii.Number(0)
		props.MaxEventAge = awscdk.Duration_Seconds(jsii.Number(ReconcilerPeriod))
		// One pass at a time: a tick that finds a pass still running waits
		// in Lambda's async queue (at most MaxEventAge) instead of starting
		// a second one, and API traffic can never starve the reconciler.
		props.ReservedConcurrentExecutions = jsii.Number(1)
	}
	if f.Method != nil && f.Method.Name == HeartbeatMethod && cfg.HeartbeatReservedConcurrency > 0 {
		// Heartbeats keep their own executions: tenant traffic on the
		// other functions cannot take them (Heartbeat capacity).
		props.ReservedConcurrentExecutions = jsii.Number(cfg.HeartbeatReservedConcurrency)
	}
	fn := awslambda.NewFunction(scope, jsii.String("Function"), props)
	s.Lambdas[f.Name] = fn
	s.Roles[f.Name] = role
}

// statements turns an Access into IAM statements on this stack's resources.
func (s *Stack) statements(a Access) []awsiam.PolicyStatement {
	var out []awsiam.PolicyStatement
	stmt := func(actions []string, resources ...*string) {
		if len(actions) == 0 {
			return
		}
		out = append(out, awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions: jsii.Strings(actions...), Resources: &resources,
		}))
	}
	table := s.Table.TableArn()
	stmt(a.TableItem, table)
	if len(a.TableQuery) > 0 {
		// Only where the catalog says the method's Query reads.
		var resources []*string
		for _, ix := range a.Indexes {
			if ix == api.BaseTable {
				resources = append(resources, table)
			} else {
				resources = append(resources, jsii.String(*table+"/index/"+ix))
			}
		}
		stmt(a.TableQuery, resources...)
	}
	if len(a.TableKey) > 0 {
		// The table key is usable only through DynamoDB in this region.
		out = append(out, awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions:   jsii.Strings(a.TableKey...),
			Resources: jsii.Strings(*s.TableKey.KeyArn()),
			Conditions: &map[string]any{
				"StringEquals": map[string]any{"kms:ViaService": "dynamodb." + *s.Stack.Region() + ".amazonaws.com"},
			},
		}))
	}
	stmt(a.Signing, s.SigningKey.KeyArn())
	stmt(a.LogKey, s.LogKey.KeyArn())
	stmt(a.CursorKey, s.CursorKey.SecretArn())
	return out
}

// applicationLogLevels maps logLevel to Lambda's application log level.
var applicationLogLevels = map[string]awslambda.ApplicationLogLevel{
	"debug": awslambda.ApplicationLogLevel_DEBUG,
	"info":  awslambda.ApplicationLogLevel_INFO,
}

// keyAdministration are the actions of a key administrator: manage the key,
// its policy, tags, aliases and deletion; never use it (no Sign, no grants).
var keyAdministration = []string{
	"kms:DescribeKey", "kms:GetKeyPolicy", "kms:PutKeyPolicy", "kms:ListKeyPolicies", "kms:GetKeyRotationStatus",
	"kms:ListResourceTags", "kms:TagResource", "kms:UntagResource", "kms:UpdateKeyDescription",
	"kms:EnableKey", "kms:DisableKey", "kms:ScheduleKeyDeletion", "kms:CancelKeyDeletion",
	"kms:CreateAlias", "kms:UpdateAlias", "kms:DeleteAlias", "kms:ListGrants", "kms:RevokeGrant",
}

// signingKeyPolicy is the release key's whole key policy. Unlike the default
// (kms:* to the account, which lets any principal whose IAM policy allows
// kms:Sign sign releases), it names who may sign: only the role of context
// releaseSignerRoleArn, with ECDSA_SHA_256. Administration goes to
// releaseKeyAdminRoleArn (default: the account, through IAM) and never
// includes Sign; the account may read the public key (what releases-register
// pins through its own IAM policy). No statement allows kms:*.
func signingKeyPolicy(scope constructs.Construct, cfg Config) awsiam.PolicyDocument {
	statements := signKeyBase(cfg)
	if cfg.ReleaseSignerRole != "" {
		statements = append(statements, awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:        jsii.String("SignReleases"),
			Principals: &[]awsiam.IPrincipal{awsiam.NewArnPrincipal(jsii.String(cfg.ReleaseSignerRole))},
			Actions:    jsii.Strings("kms:Sign", "kms:GetPublicKey", "kms:DescribeKey"), Resources: jsii.Strings("*"),
			Conditions: &map[string]any{"StringEquals": map[string]any{"kms:SigningAlgorithm": "ECDSA_SHA_256"}},
		}))
	} else {
		awscdk.Annotations_Of(scope).AddWarningV2(jsii.String("bettercompute:no-release-signer"),
			jsii.String("context "+CtxReleaseSignerRole+" is empty: no principal may sign releases with the stack's signing key (set it to the role operators sign with)"), nil)
	}
	return awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{Statements: &statements})
}

// grantGuard denies kms:CreateGrant unless the grant is for an AWS service
// acting on a resource (DynamoDB creates its own grants on the table key):
// nobody can hand out use of a key through a grant.
func grantGuard() awsiam.PolicyStatement {
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid: jsii.String("GrantsOnlyForAWSResources"), Effect: awsiam.Effect_DENY,
		Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
		Actions:    jsii.Strings("kms:CreateGrant"), Resources: jsii.Strings("*"),
		Conditions: &map[string]any{"Bool": map[string]any{"kms:GrantIsForAWSResource": "false"}},
	})
}

// addAPI creates the HTTP API, its throttled stage and one JWT-authorized
// route per catalog method, each integrating its own function.
func (s *Stack) addAPI(cfg Config, fns []Function, removal awscdk.RemovalPolicy) {
	s.API = awsapigatewayv2.NewHttpApi(s.Stack, jsii.String("Api"), &awsapigatewayv2.HttpApiProps{
		ApiName:            jsii.String(cfg.StackName),
		Description:        jsii.String("Better Compute control plane API (POST /api/compute/{resource}/{method})"),
		CreateDefaultStage: jsii.Bool(false),
	})
	access := awslogs.NewLogGroup(s.Stack, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		Retention:     retentionDays[cfg.LogRetentionDays],
		RemovalPolicy: removal,
	})
	s.Stage = s.API.AddStage(jsii.String("DefaultStage"), &awsapigatewayv2.HttpStageOptions{
		StageName:  jsii.String("$default"),
		AutoDeploy: jsii.Bool(true),
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit: jsii.Number(cfg.ThrottleRate), BurstLimit: jsii.Number(cfg.ThrottleBurst),
		},
	})
	// One JSON line per request; the principal is the token's sub.
	// Set on the L1 stage: HTTP APIs write through a service-linked role.
	s.Stage.Node().DefaultChild().(awsapigatewayv2.CfnStage).SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: access.LogGroupArn(),
		Format:         jsii.String(accessLogFormat),
	})

	auth := awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("JwtAuthorizer"), jsii.String(cfg.JWTIssuer),
		&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{
			AuthorizerName: jsii.String("jwt"),
			JwtAudience:    jsii.Strings(cfg.JWTAudience...),
		})
	var heartbeat awsapigatewayv2.HttpRoute
	for _, f := range fns {
		if f.IsConsole() {
			s.addConsoleRoutes(f, auth)
			continue
		}
		if f.Method == nil {
			continue
		}
		routes := s.API.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(f.Method.Path()),
			Methods:     &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod_POST},
			Integration: awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String(f.Name), s.Lambdas[f.Name], nil),
			Authorizer:  auth,
		})
		if f.Method.Name == HeartbeatMethod {
			heartbeat = (*routes)[0]
		}
	}
	// The heartbeat route's own bucket, sized for the fleet rather than for
	// a tenant (the other routes keep DefaultRouteSettings). RouteSettings
	// is raw JSON to CloudFormation (a route key → settings map), so the
	// property names are spelled as CloudFormation wants them. The stage
	// names the route by key, so it is created after the route.
	s.Stage.Node().DefaultChild().(awsapigatewayv2.CfnStage).SetRouteSettings(map[string]any{
		HeartbeatRouteKey(): map[string]any{
			"ThrottlingRateLimit":  cfg.HeartbeatRateLimit,
			"ThrottlingBurstLimit": cfg.HeartbeatBurstLimit,
		},
	})
	s.Stage.Node().AddDependency(heartbeat)
}

// ConsoleRoutes are the console's routes: the shell and its assets are
// public (they hold no data); the fragments and the actions are behind the
// JWT authorizer, so the viewer is the token's sub as for every method.
var ConsoleRoutes = []struct {
	Method     awsapigatewayv2.HttpMethod
	Path       string
	Authorized bool
}{
	{awsapigatewayv2.HttpMethod_GET, "/console", false},
	{awsapigatewayv2.HttpMethod_GET, "/console/{proxy+}", false},
	{awsapigatewayv2.HttpMethod_GET, "/console/f/{proxy+}", true},
	{awsapigatewayv2.HttpMethod_POST, "/console/a/{proxy+}", true},
}

func (s *Stack) addConsoleRoutes(f Function, auth awsapigatewayv2.IHttpRouteAuthorizer) {
	integration := awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String(f.Name), s.Lambdas[f.Name], nil)
	for _, r := range ConsoleRoutes {
		opts := &awsapigatewayv2.AddRoutesOptions{Path: jsii.String(r.Path), Methods: &[]awsapigatewayv2.HttpMethod{r.Method}, Integration: integration}
		if r.Authorized {
			opts.Authorizer = auth
		}
		s.API.AddRoutes(opts)
	}
}

// consoleEnv is the console's sign-in: the issuer the JWT authorizer
// trusts and its first audience as the OIDC client (a public client, with
// PKCE), and the provider's endpoints when discovery does not give them
// (Cognito serves them on its hosted domain).
func consoleEnv(cfg Config) map[string]string {
	env := map[string]string{"BC_CONSOLE_OIDC_ISSUER": cfg.JWTIssuer}
	if len(cfg.JWTAudience) > 0 {
		env["BC_CONSOLE_OIDC_CLIENT_ID"] = cfg.JWTAudience[0]
	}
	if cfg.ConsoleAuthorizeURL != "" {
		env["BC_CONSOLE_OIDC_AUTHORIZE_URL"] = cfg.ConsoleAuthorizeURL
	}
	if cfg.ConsoleTokenURL != "" {
		env["BC_CONSOLE_OIDC_TOKEN_URL"] = cfg.ConsoleTokenURL
	}
	return env
}

// HeartbeatMethod is the method whose route and function are sized for the
// fleet (docs/infrastructure.md, Heartbeat capacity).
const HeartbeatMethod = "nodes.heartbeat"

// HeartbeatRouteKey is the heartbeat's HTTP API route key.
func HeartbeatRouteKey() string { return "POST " + api.Lookup(HeartbeatMethod).Path() }

const accessLogFormat = `{"requestId":"$context.requestId","ip":"$context.identity.sourceIp","time":"$context.requestTime",` +
	`"routeKey":"$context.routeKey","status":"$context.status","responseLength":"$context.responseLength",` +
	`"latencyMs":"$context.responseLatency","integrationLatencyMs":"$context.integrationLatency",` +
	`"integrationError":"$context.integrationErrorMessage","authorizerError":"$context.authorizer.error",` +
	`"principal":"$context.authorizer.claims.sub"}`

// addSchedule invokes the reconciler every minute. EventBridge retries a
// failed delivery for a little while; what it cannot deliver lands in the
// DLQ (a newer tick makes an old one worthless, hence the short age).
func (s *Stack) addSchedule() {
	s.Schedule = awsevents.NewRule(s.Stack, jsii.String("ReconcilerSchedule"), &awsevents.RuleProps{
		Description: jsii.String("Better Compute: one reconciler pass a minute (capacity.reservations)"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Seconds(jsii.Number(ReconcilerPeriod))),
	})
	s.Schedule.AddTarget(awseventstargets.NewLambdaFunction(s.Lambdas[api.ReconcilerFunction], &awseventstargets.LambdaFunctionProps{
		DeadLetterQueue: s.DLQ,
		RetryAttempts:   jsii.Number(2),
		MaxEventAge:     awscdk.Duration_Minutes(jsii.Number(2)),
	}))
}

// retentionDays are CloudWatch's retention periods by day count.
var retentionDays = map[int]awslogs.RetentionDays{
	1: awslogs.RetentionDays_ONE_DAY, 3: awslogs.RetentionDays_THREE_DAYS, 5: awslogs.RetentionDays_FIVE_DAYS,
	7: awslogs.RetentionDays_ONE_WEEK, 14: awslogs.RetentionDays_TWO_WEEKS, 30: awslogs.RetentionDays_ONE_MONTH,
	60: awslogs.RetentionDays_TWO_MONTHS, 90: awslogs.RetentionDays_THREE_MONTHS, 120: awslogs.RetentionDays_FOUR_MONTHS,
	150: awslogs.RetentionDays_FIVE_MONTHS, 180: awslogs.RetentionDays_SIX_MONTHS, 365: awslogs.RetentionDays_ONE_YEAR,
	400: awslogs.RetentionDays_THIRTEEN_MONTHS, 545: awslogs.RetentionDays_EIGHTEEN_MONTHS, 731: awslogs.RetentionDays_TWO_YEARS,
	1827: awslogs.RetentionDays_FIVE_YEARS, 3653: awslogs.RetentionDays_TEN_YEARS,
}
