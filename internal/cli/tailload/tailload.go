// Package tailload implements `continuum tail-load`: decode a publisher's
// (or a whole fleet's) kv_metrics frames live.
//
// Imports: cmdutil and engines (discovery sources, fleet, load, wire, zmtp);
// never another command.
package tailload

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/sources"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// Options are the parsed flags and dependencies of `tail-load`.
type Options struct {
	IO         *iostreams.IOStreams
	Env        config.LookupEnv
	Logger     func() (*slog.Logger, error)
	ConfigFile string
	Discovery  cmdutil.DiscoveryFlags

	Endpoint string
	Topic    string
	JSON     bool
	Raw      bool
	Count    int
	Timeout  time.Duration
}

// NewCmdTailLoad returns `continuum tail-load`. runF replaces the run step in tests.
func NewCmdTailLoad(f *cmdutil.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Env: f.Env, Logger: f.Logger}
	cmd := &cobra.Command{
		Use:   "tail-load [tcp://HOST:PORT]",
		Short: "Decode ZMQ load frames live, from one publisher or a whole fleet",
		Long: `Subscribe to Dynamo event-plane publishers and print every message decoded:
the envelope (publisher id, sequence, publish time) and the ActiveLoad sample
(worker, dp rank, active decode blocks, active prefill tokens, kv used blocks),
or why a frame was rejected, with the same checks serve applies.

With an endpoint, one publisher is tailed (the discovery flags and --timeout
do not apply, and are refused). Without one, the fleet is read
from the discovery source (--config, or the discover flags) and every
publisher of the topic is tailed. A summary of results goes to stderr on exit.
With --count N, an interruption before N messages exits 1.`,
		Example: `  continuum tail-load tcp://10.0.0.7:41000
  continuum tail-load --json --count 5 tcp://127.0.0.1:5555
  continuum tail-load --etcd-endpoints http://etcd.dynamo.svc:2379 --namespace dynamo`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ConfigFile = f.ConfigPath()
			opts.Discovery.Capture(cmd.Flags())
			if len(args) == 1 {
				opts.Endpoint = args[0]
				if _, _, err := zmtp.SplitTCPEndpoint(opts.Endpoint); err != nil {
					return cmdutil.FlagErrorf("%v", err)
				}
				// The fleet is not read with an endpoint: a discovery flag
				// would be ignored, so it is refused.
				n := opts.Discovery.FirstGiven(cmd.Flags())
				if n == "" && cmd.Flags().Changed("timeout") {
					n = "timeout"
				}
				if n != "" {
					return cmdutil.FlagErrorf("--%s reads the fleet: drop it or the endpoint", n)
				}
			}
			if opts.Count < 0 {
				return cmdutil.FlagErrorf("--count must not be negative")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return Run(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Topic, "topic", fleet.TopicLoad, "event-plane topic to subscribe to")
	fl.BoolVar(&opts.JSON, "json", false, "print JSON lines")
	fl.BoolVar(&opts.Raw, "raw", false, "add a hex dump of each message's frames")
	fl.IntVar(&opts.Count, "count", 0, "exit after N messages (0: until interrupted); interrupted before N, exit 1")
	fl.DurationVar(&opts.Timeout, "timeout", discovery.SeedTimeout, "without an endpoint: how long to wait for the fleet's first read")
	opts.Discovery.Register(cmd)
	return cmd
}

// Line is one JSON line of output for a decoded message.
type Line struct {
	PublisherID         string   `json:"publisher_id"`
	Sequence            uint64   `json:"sequence"`
	Topic               string   `json:"topic"`
	PublishedAt         *uint64  `json:"published_at"`
	WorkerID            *string  `json:"worker_id"`
	DPRank              *uint32  `json:"dp_rank"`
	ActiveDecodeBlocks  *uint64  `json:"active_decode_blocks"`
	ActivePrefillTokens *uint64  `json:"active_prefill_tokens"`
	KVUsedBlocks        *uint64  `json:"kv_used_blocks"`
	Frames              []string `json:"frames,omitempty"`
}

// RejectLine is one JSON line for a rejected message.
type RejectLine struct {
	Result      string   `json:"result"`
	Detail      string   `json:"detail"`
	PublisherID string   `json:"publisher_id,omitempty"`
	Frames      []string `json:"frames,omitempty"`
}

type printer struct {
	o       *Options
	mu      sync.Mutex
	seen    int
	results map[string]int
	stop    context.CancelFunc
	// fleet: the publishers come from discovery, and their addresses are
	// never printed; failed says what was last printed of each one's
	// connection failing (a line when that changes, not one per retry).
	fleet  bool
	failed map[uint64]string
	// out is the standard output, which remembers its first write error:
	// the tail then stops and fails (what it printed did not reach its
	// reader: a full disk, a closed pipe).
	out *stickyWriter
}

func newPrinter(o *Options, stop context.CancelFunc) *printer {
	return &printer{o: o, results: map[string]int{}, stop: stop, out: &stickyWriter{w: o.IO.Out}}
}

// stickyWriter writes to w until a write fails, and keeps that error.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(b []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(b)
	if err != nil {
		s.err = err
	}
	return n, err
}

// Run tails until interrupted or --count messages were printed. With
// --count, an interruption before that many messages is a failure: a
// script that bounds the tail (timeout 30 continuum tail-load --count 5)
// learns that the messages it asked for did not come.
func Run(ctx context.Context, o *Options) (err error) {
	// A closed pipe (tail-load | head -1) is a failed write like a full
	// disk: the tail stops, prints its summary and exits 1. Unless SIGPIPE
	// is asked for, Go's runtime kills the process at the first write to a
	// closed standard output instead (exit 141, no summary); asked for,
	// the write fails with EPIPE, which the standard output's sticky
	// writer keeps.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := newPrinter(o, cancel)
	defer func() {
		p.mu.Lock()
		seen, outErr := p.seen, p.out.err
		p.mu.Unlock()
		if outErr != nil {
			err = &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: fmt.Errorf("writing the standard output: %w", outErr)}
			return
		}
		if err == nil && o.Count > 0 && seen < o.Count {
			err = &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: fmt.Errorf("interrupted after %d of the %d messages --count asked for", seen, o.Count)}
		}
	}()
	// The summary tells what a tail saw, so it follows a tail that began:
	// a configuration or source that fails first leaves its error the
	// only line.
	if o.Endpoint != "" {
		defer p.summary()
		// A line when the failure changes, not one per retry (the same
		// refusal every backoff step says nothing new).
		// A message that comes through forgets the last failure.
		last := ""
		observe := func(ev load.Event) {
			last = ""
			p.observe(ev)
		}
		return load.Tail(ctx, load.TailConfig{Endpoint: o.Endpoint, Topic: o.Topic, Connector: &zmtp.Direct{}, Observe: observe,
			OnError: func(err error) {
				if msg := iostreams.Printable(err.Error()); msg != last {
					last = msg
					fmt.Fprintf(o.IO.ErrOut, "tail-load: %s: %s\n", o.Endpoint, msg)
				}
			}})
	}
	cfg, err := o.Discovery.Resolve(o.ConfigFile, o.Env)
	if err != nil {
		return err
	}
	logger, err := o.Logger()
	if err != nil {
		return err
	}
	fl, err := sources.Open(ctx, &cfg.Dynamo.Discovery, o.Discovery.KubeClient(), logger, o.Timeout)
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted
		}
		return err
	}
	defer fl.Close()
	defer p.summary()
	reg := fl.Registry
	n := 0
	for pub := range reg.Snapshot().Publishers.All() {
		if pub.Topic == o.Topic {
			n++
		}
	}
	fmt.Fprintf(o.IO.ErrOut, "tail-load: %d %s publishers in the fleet\n", n, o.Topic)
	if cfg.Dynamo.Load.Transport == config.TransportBroker {
		fmt.Fprintln(o.IO.ErrOut, "tail-load: dynamo.load.transport is broker, but tail-load connects to each publisher directly: from outside the cluster they may not be reachable")
	}
	connector := &zmtp.Direct{}
	if cidrs, err := zmtp.ParseCIDRs(cfg.Dynamo.Load.DirectAllowCIDRs); err == nil {
		connector.Allow = cidrs
	}
	p.fleet, p.failed = true, map[uint64]string{}
	load.TailFleet(ctx, reg, o.Topic, connector, p.observe, func(pid uint64, err error) {
		if ctx.Err() == nil {
			p.publisherFailed(pid, err)
		}
	})
	return nil
}

// maxFailedPublishers bounds what a fleet tail remembers of failed
// connections (a fleet subscribes to at most 1024 publishers at a time,
// but publishers come and go).
const maxFailedPublishers = 4096

// publisherFailed prints why a publisher's connection failed or ended,
// when that differs from what was last printed for it. The reason names
// no address: the fleet's addresses are never printed.
func (p *printer) publisherFailed(pid uint64, err error) {
	why := connectionFailure(err)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed[pid] == why {
		return
	}
	if len(p.failed) >= maxFailedPublishers {
		clear(p.failed) // publishers gone from the fleet: at worst a line again
	}
	p.failed[pid] = why
	fmt.Fprintf(p.o.IO.ErrOut, "tail-load: publisher %d: %s\n", pid, why)
}

// connectionFailure says why a publisher's connection failed, without its
// address (a network error's text quotes both ends).
func connectionFailure(err error) string {
	var dns *net.DNSError
	switch {
	case errors.Is(err, zmtp.ErrNotAllowed):
		return "its address is outside dynamo.load.direct_allow_cidrs"
	case errors.Is(err, zmtp.ErrProtocol):
		return iostreams.Printable(err.Error()) // the zmtp package's own words
	case errors.As(err, &dns):
		return "its host name does not resolve"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to it"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "it closed the connection"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	}
	return "the connection failed"
}

func hexFrames(frames [][]byte) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = hex.EncodeToString(f)
	}
	return out
}

func (p *printer) observe(ev load.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.o.Count > 0 && p.seen >= p.o.Count {
		return
	}
	if ev.Result == wire.ResultTransportRefused {
		// A connection, not a message: counted in the summary, not
		// towards --count; in a fleet, publisherFailed says it.
		p.results[ev.Result]++
		if p.fleet {
			return
		}
	} else {
		p.seen++
		p.results[ev.Result]++
		if p.fleet {
			// Its connection works again: its next failure is news.
			delete(p.failed, ev.PublisherID)
		}
	}
	if p.o.JSON {
		p.writeJSON(ev)
	} else {
		p.writeText(ev)
	}
	if p.out.err != nil || p.o.Count > 0 && p.seen >= p.o.Count {
		p.stop()
	}
}

func (p *printer) writeJSON(ev load.Event) {
	var v any
	var frames []string
	if p.o.Raw {
		frames = hexFrames(ev.Frames)
	}
	if ev.Result != telemetry.ResultAccepted {
		r := RejectLine{Result: ev.Result, Detail: ev.Detail, Frames: frames}
		if ev.PublisherID != 0 {
			r.PublisherID = strconv.FormatUint(ev.PublisherID, 10)
		}
		v = r
	} else {
		env := ev.Envelope
		l := Line{PublisherID: strconv.FormatUint(env.PublisherID, 10), Sequence: env.Sequence, Topic: env.Topic, Frames: frames}
		if env.PublishedAt != 0 {
			at := env.PublishedAt
			l.PublishedAt = &at
		}
		if a := ev.Load; a != nil {
			id := strconv.FormatUint(a.WorkerID, 10)
			rank := a.DPRank
			l.WorkerID, l.DPRank = &id, &rank
			l.ActiveDecodeBlocks, l.ActivePrefillTokens, l.KVUsedBlocks = a.ActiveDecodeBlocks, a.ActivePrefillTokens, a.KVUsedBlocks
		}
		v = l
	}
	b, err := json.Marshal(v)
	if err == nil {
		fmt.Fprintf(p.out, "%s\n", b)
	}
}

func opt(v *uint64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatUint(*v, 10)
}

func (p *printer) writeText(ev load.Event) {
	w := p.out
	now := time.Now().UTC().Format("15:04:05.000")
	if ev.Result != telemetry.ResultAccepted {
		// A detail may quote what the publisher sent (a field name of its
		// payload): escaped, it cannot drive the terminal or split a line.
		fmt.Fprintf(w, "%s  %-17s %s\n", now, "REJECT "+ev.Result, iostreams.Printable(ev.Detail))
	} else {
		env := ev.Envelope
		age := "-"
		if env.PublishedAt != 0 {
			age = time.Since(time.UnixMilli(int64(env.PublishedAt))).Round(time.Millisecond).String()
		}
		if a := ev.Load; a != nil {
			fmt.Fprintf(w, "%s  pub=%d seq=%d  worker=%s rank=%d  decode=%s prefill=%s kv_used=%s  age=%s\n", now,
				env.PublisherID, env.Sequence, wire.FormatID(a.WorkerID), a.DPRank,
				opt(a.ActiveDecodeBlocks), opt(a.ActivePrefillTokens), opt(a.KVUsedBlocks), age)
		} else {
			fmt.Fprintf(w, "%s  pub=%d seq=%d  topic=%s payload=%d bytes  age=%s\n", now, env.PublisherID, env.Sequence, env.Topic, len(env.Payload), age)
		}
	}
	if p.o.Raw {
		for i, f := range ev.Frames {
			fmt.Fprintf(w, "  frame %d (%d bytes)\n", i, len(f))
			dump(w, f)
		}
	}
}

func dump(w io.Writer, b []byte) {
	const limit = 4096
	if len(b) > limit {
		b = b[:limit]
	}
	for _, line := range strings.Split(strings.TrimRight(hex.Dump(b), "\n"), "\n") {
		fmt.Fprintf(w, "    %s\n", line)
	}
}

func (p *printer) summary() {
	p.mu.Lock()
	defer p.mu.Unlock()
	parts := make([]string, 0, len(p.results))
	for _, k := range slices.Sorted(maps.Keys(p.results)) {
		parts = append(parts, fmt.Sprintf("%d %s", p.results[k], k))
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	fmt.Fprintf(p.o.IO.ErrOut, "tail-load: %d messages: %s\n", p.seen, strings.Join(parts, ", "))
}
