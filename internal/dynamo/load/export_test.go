package load

import "time"

// Handle feeds one message to a reader for publisher pid (tests).
type Reader struct{ r *reader }

// NewReader returns a reader counting results into count.
func NewReader(pid uint64, store *Store, count func(string)) *Reader {
	return &Reader{&reader{pid: pid, ns: NS("dynamo"), topic: "kv_metrics", store: store, count: count}}
}

// Handle applies one message.
func (r *Reader) Handle(frames [][]byte, now time.Time) { r.r.handle(frames, now) }
