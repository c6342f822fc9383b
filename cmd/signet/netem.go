package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/signet-im/signet/shared/netem"
)

// runNetem is `signet netem`: a weak-network WebSocket proxy in front of a
// Signet endpoint, for any client.
func runNetem(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("signet netem", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:3002", "address clients connect to")
	upstream := fs.String("upstream", "ws://127.0.0.1:3001/", "the WebSocket API to relay to (signet local, or wss://{api}.execute-api.{region}.amazonaws.com/{stage})")
	profile := fs.String("profile", "perfect", "named network: "+strings.Join(netem.ProfileNames(), ", ")+" (the flags below override its values)")
	seed := fs.Uint64("seed", 1, "fault seed: the same seed and traffic inject the same faults")
	loss := fs.Float64("loss", -1, "probability a frame is dropped, each direction (0..1)")
	dup := fs.Float64("duplicate", -1, "probability a frame is delivered twice (0..1)")
	reorder := fs.Float64("reorder", -1, "probability a frame is held back behind the next one (0..1)")
	delay := fs.String("delay", "", "one-way delay per frame, e.g. 200ms or 200ms±100ms (also 200ms+-100ms)")
	cutEvery := fs.Duration("cut-every", -1, "mean time between abrupt connection cuts (0: never)")
	bhEvery := fs.Duration("blackhole-every", -1, "mean time between half-open episodes: nothing passes, sockets stay open (0: never)")
	bhFor := fs.Duration("blackhole-for", -1, "how long a half-open episode lasts before the connection is cut")
	every := fs.Duration("stats-every", 10*time.Second, "how often to print what was done (0: only at exit)")
	quiet := fs.Bool("quiet", false, "do not log each cut and blackhole")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: signet netem [flags]

A weak-network proxy (弱网模拟) between any WebSocket client and a Signet API:
it drops, delays, duplicates and reorders frames, cuts connections and
blackholes them half-open, by a seeded profile. Point your client at
--listen instead of the API; the token and deviceId query parameters and an
Authorization header are passed on.

Examples:
  signet netem --profile subway                       # in front of signet local
  signet netem --loss 0.2 --delay 200ms±100ms --seed 7
  signet netem --upstream wss://abc.execute-api.eu-west-1.amazonaws.com/prod --profile 3g
  signet chat --user bob --url ws://127.0.0.1:3002/   # a client through it

Profiles:
`)
		for _, n := range netem.ProfileNames() {
			fmt.Fprintf(fs.Output(), "  %-8s %s\n", n, netem.Profiles[n])
		}
		fmt.Fprint(fs.Output(), "\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	p, ok := netem.Profiles[*profile]
	if !ok {
		return fmt.Errorf("%w: unknown profile %q (have %s)", errUsage, *profile, strings.Join(netem.ProfileNames(), ", "))
	}
	for _, o := range []struct {
		v   float64
		dst *float64
	}{{*loss, &p.Loss}, {*dup, &p.Duplicate}, {*reorder, &p.Reorder}} {
		if o.v >= 0 {
			*o.dst = o.v
		}
	}
	for _, o := range []struct {
		v   time.Duration
		dst *time.Duration
	}{{*cutEvery, &p.CutEvery}, {*bhEvery, &p.BlackholeEvery}, {*bhFor, &p.BlackholeFor}} {
		if o.v >= 0 {
			*o.dst = o.v
		}
	}
	if *delay != "" {
		d, j, err := netem.ParseDelay(*delay)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		p.Delay, p.Jitter = d, j
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	level := slog.LevelInfo
	if *quiet {
		level = slog.LevelWarn
	}
	x := netem.New(*upstream, p, *seed)
	x.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: x, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "netem: ws://%s/ -> %s\n  network: %s\n  seed %d; Ctrl-C to stop\n", ln.Addr(), *upstream, p, *seed)
	var tick <-chan time.Time
	if *every > 0 {
		t := time.NewTicker(*every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-tick:
			fmt.Fprintf(stdout, "netem: %s\n", x.Stats())
		case err := <-served:
			if !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		case <-ctx.Done():
			x.CutAll()
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = srv.Shutdown(sctx)
			cancel()
			fmt.Fprintf(stdout, "netem: stopped: %s\n", x.Stats())
			return nil
		}
	}
}
