package dynamo

// Spread exports spread to the package's external tests.
var Spread = spread
