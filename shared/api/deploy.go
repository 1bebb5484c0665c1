package api

// TagFunction is the tag the CDK app (infra/stack) puts on every resource of
// a function (its Lambda, role and log group), valued with the function's
// name (Method.FunctionName, or ReconcilerFunction): for cost allocation, and
// to find a function's resources in the synthesized template
// (test/lambdastack).
const TagFunction = "bettercompute:function"
