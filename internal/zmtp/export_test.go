package zmtp

// BufferCap is the capacity of the message buffer (tests).
func (s *Sub) BufferCap() int { return cap(s.buf) }
