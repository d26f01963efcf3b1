package kvinspect

// Report renders an explanation (tests).
var Report = report

// ReadRequest reads match's request body (tests).
var ReadRequest = readRequest

// Paths match reads requests for (tests).
const (
	PathChat        = pathChat
	PathCompletions = pathCompletions
)
