package kvinspect

// Report renders an explanation (tests).
var Report = report
