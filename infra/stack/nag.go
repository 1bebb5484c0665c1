package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/bettercompute/control-plane/shared/api"
)

// RulePacks are the cdk-nag packs every synth runs (as aspects): AWS's
// AwsSolutions and Serverless rules. An unsuppressed finding is an error
// annotation, so `cdk synth` and `make synth` fail on it and the infra
// tests name it.
func RulePacks() []awscdk.IAspect {
	props := func() *cdknag.NagPackProps {
		// LogIgnores: a suppressed finding is still reported (as info), so
		// the tests can tell a suppression that no longer matches anything.
		return &cdknag.NagPackProps{Verbose: jsii.Bool(true), LogIgnores: jsii.Bool(true), Reports: jsii.Bool(false)}
	}
	return []awscdk.IAspect{cdknag.NewAwsSolutionsChecks(props()), cdknag.NewServerlessChecks(props())}
}

// Suppression accepts one rule's findings on named resources, with the
// reason. Resources are construct paths below the stack ("CursorKey/Resource");
// AppliesTo narrows rules that report several findings per resource (IAM5's
// "Action::kms:ReEncrypt*").
type Suppression struct {
	Rule      string
	Resources []string
	AppliesTo []string
	Reason    string
}

// Suppressions is every accepted finding of the rule packs on the stack cfg
// builds. Each names its rule, its resources and why the finding does not
// apply or is accepted; docs/infrastructure.md lists them.
func Suppressions(cfg Config, fns []Function) []Suppression {
	var apiFns, writers, roles []string
	for _, f := range fns {
		roles = append(roles, f.Name+"/Role/DefaultPolicy/Resource")
		if f.Method != nil || f.IsConsole() {
			apiFns = append(apiFns, f.Name+"/Function/Resource")
		}
		if f.Access.Writes() {
			writers = append(writers, f.Name+"/Role/DefaultPolicy/Resource")
		}
	}
	sups := []Suppression{
		{Rule: "AwsSolutions-SMG4", Resources: []string{"CursorKey/Resource"},
			Reason: "The cursor key only makes tampered pagination cursors detectable (every query is bound to the caller's tenant partition either way); rotating it would turn every outstanding cursor into INVALID_INPUT mid-listing. Rotate by hand (put a new value, then the list functions pick it up at their next cold start) if it leaks."},
		{Rule: "AwsSolutions-APIG4", Resources: []string{"Api/GET--console/Resource", "Api/GET--console--{proxy+}/Resource"},
			Reason: "The console's page frame and its hashed assets: public by design, they hold no data of the API (the frame's script fetches each page's data from GET /console/f/{proxy+}, and actions are POST /console/a/{proxy+}, both behind the JWT authorizer). Sign-in needs the frame before there is a token."},
		{Rule: "AwsSolutions-SQS3", Resources: []string{"ReconcilerDLQ/Resource"},
			Reason: "This queue is a dead-letter queue: the EventBridge schedule's target DLQ (cdk-nag only recognizes queues named in another queue's RedrivePolicy). ReconcilerDLQAlarm fires on its first message."},
		{Rule: "Serverless-SQSRedrivePolicy", Resources: []string{"ReconcilerDLQ/Resource"},
			Reason: "This queue is itself the dead-letter queue of the reconciler's schedule; nothing consumes it, so nothing could be redriven. ReconcilerDLQAlarm fires on its first message."},
		{Rule: "Serverless-LambdaDLQ", Resources: apiFns,
			Reason: "API Gateway invokes these functions synchronously: the caller receives every failure as an HTTP answer, and a dead-letter queue only ever receives asynchronous events, of which these functions have none."},
		{Rule: "Serverless-LambdaDLQ", Resources: []string{api.ReconcilerFunction + "/Function/Resource"},
			Reason: "A failed pass needs no replay: its event is a schedule tick without data, the next tick a minute later is the retry, and every step of a pass is idempotent (docs/capacity.md). Failed passes alarm through ReconcilerErrorsAlarm; undeliverable ticks land in ReconcilerDLQ."},
		{Rule: "Serverless-LambdaAsyncFailureDestination", Resources: []string{api.ReconcilerFunction + "/Function/EventInvokeConfig/Resource"},
			Reason: "Same as its LambdaDLQ finding: a failed tick carries nothing to recover (the next tick is the retry), and ReconcilerErrorsAlarm reports failed passes."},
		{Rule: "AwsSolutions-IAM5", Resources: writers, AppliesTo: []string{"Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*"},
			Reason: "The KMS actions DynamoDB documents for a table encrypted with a customer-managed key (the same CDK's Table.grant* give), only on the table key and only through DynamoDB (condition kms:ViaService = dynamodb.<region>.amazonaws.com)."},
		{Rule: "AwsSolutions-IAM5", Resources: roles, AppliesTo: []string{"Resource::*"},
			Reason: "Active X-Ray tracing: xray:PutTraceSegments and xray:PutTelemetryRecords support no resource-level permissions, so their only resource is *. These are the only actions on *."},
	}
	if cfg.AlarmEmail != "" {
		sups = append(sups,
			Suppression{Rule: "AwsSolutions-SQS3", Resources: []string{alarmEmailDLQ + "/Resource"},
				Reason: "This queue is a dead-letter queue: the alarm e-mail subscription's (its SNS RedrivePolicy; cdk-nag only recognizes queues named in another queue's RedrivePolicy). " + AlarmEmailDLQ + " fires on its first message."},
			Suppression{Rule: "Serverless-SQSRedrivePolicy", Resources: []string{alarmEmailDLQ + "/Resource"},
				Reason: "This queue is itself the dead-letter queue of the alarm e-mail subscription; nothing consumes it, so nothing could be redriven. " + AlarmEmailDLQ + " fires on its first message."})
	}
	return sups
}

// applyRulePacks adds the packs to the stack and its suppressions.
func (s *Stack) applyRulePacks(cfg Config, fns []Function) {
	for _, pack := range RulePacks() {
		awscdk.Aspects_Of(s.Stack).Add(pack, nil)
	}
	for _, sup := range Suppressions(cfg, fns) {
		var applies *[]any
		if len(sup.AppliesTo) > 0 {
			a := make([]any, len(sup.AppliesTo))
			for i, v := range sup.AppliesTo {
				a[i] = v
			}
			applies = &a
		}
		for _, path := range sup.Resources {
			cdknag.NagSuppressions_AddResourceSuppressionsByPath(s.Stack, jsii.String("/"+*s.Stack.Node().Path()+"/"+path),
				&[]*cdknag.NagPackSuppression{{Id: jsii.String(sup.Rule), Reason: jsii.String(sup.Reason), AppliesTo: applies}}, jsii.Bool(false))
		}
	}
}
