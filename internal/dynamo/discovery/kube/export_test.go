package kube

// SetAnswerBounds makes the bounds answers of the API server are read
// within list (a list page) and event (a watch event), until the returned
// function restores them. Only for tests that do not run in parallel.
func SetAnswerBounds(list, event int) (restore func()) {
	prev := answerBounds
	answerBounds.list, answerBounds.event = list, event
	return func() { answerBounds = prev }
}
