package load

// Connected tells the reader a new session of its publisher began (tests).
func (r *Reader) Connected() { r.r.Connected() }
