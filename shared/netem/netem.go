// Package netem is a weak-network WebSocket proxy (弱网模拟): it sits between
// any client and a Signet WebSocket API (the local stack or a deployed
// stage) and drops, delays, duplicates and reorders frames, cuts
// connections and blackholes them half-open, by a seeded profile, so teams
// can test their own clients against the networks their users have.
//
// Every connection draws its faults from its own generator seeded by
// (seed, connection number): a run with the same seed and the same traffic
// injects the same faults.
package netem

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Profile describes a network. Probabilities apply to each frame in each
// direction; durations of zero switch a fault off.
type Profile struct {
	// Loss is the probability a frame is dropped.
	Loss float64 `json:"loss"`
	// Duplicate is the probability a frame is delivered twice.
	Duplicate float64 `json:"duplicate"`
	// Reorder is the probability a frame is held back and delivered after
	// the next frame of its direction.
	Reorder float64 `json:"reorder"`
	// Delay ± Jitter (uniform) is each frame's one-way delay; frames of a
	// direction keep their order unless reordered.
	Delay  time.Duration `json:"delay"`
	Jitter time.Duration `json:"jitter"`
	// CutEvery is the mean time between abrupt cuts of a connection
	// (exponentially distributed; no close frame, like a lost TCP path).
	CutEvery time.Duration `json:"cutEvery"`
	// BlackholeEvery is the mean time between half-open episodes: for
	// BlackholeFor nothing passes in either direction while both sockets
	// stay open; then the connection is cut.
	BlackholeEvery time.Duration `json:"blackholeEvery"`
	BlackholeFor   time.Duration `json:"blackholeFor"`
}

// Profiles are named networks.
var Profiles = map[string]Profile{
	"perfect": {},
	"wifi":    {Loss: 0.005, Delay: 15 * time.Millisecond, Jitter: 10 * time.Millisecond, CutEvery: 10 * time.Minute},
	"4g":      {Loss: 0.01, Duplicate: 0.002, Reorder: 0.01, Delay: 60 * time.Millisecond, Jitter: 40 * time.Millisecond, CutEvery: 5 * time.Minute},
	"3g": {Loss: 0.03, Duplicate: 0.005, Reorder: 0.03, Delay: 250 * time.Millisecond, Jitter: 150 * time.Millisecond,
		CutEvery: 2 * time.Minute, BlackholeEvery: 5 * time.Minute, BlackholeFor: 20 * time.Second},
	"subway": {Loss: 0.1, Duplicate: 0.02, Reorder: 0.05, Delay: 200 * time.Millisecond, Jitter: 150 * time.Millisecond,
		CutEvery: 30 * time.Second, BlackholeEvery: 90 * time.Second, BlackholeFor: 15 * time.Second},
	"hell": {Loss: 0.25, Duplicate: 0.05, Reorder: 0.1, Delay: 400 * time.Millisecond, Jitter: 300 * time.Millisecond,
		CutEvery: 15 * time.Second, BlackholeEvery: 45 * time.Second, BlackholeFor: 10 * time.Second},
}

// ProfileNames lists the named profiles, sorted.
func ProfileNames() []string {
	var out []string
	for n := range Profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ParseDelay reads "200ms", "200ms±100ms" or "200ms+-100ms".
func ParseDelay(s string) (delay, jitter time.Duration, err error) {
	base, spread, found := strings.Cut(strings.ReplaceAll(s, "+-", "±"), "±")
	if delay, err = time.ParseDuration(strings.TrimSpace(base)); err != nil || delay < 0 {
		return 0, 0, fmt.Errorf("delay %q: want a duration like 200ms or 200ms±100ms", s)
	}
	if found {
		if jitter, err = time.ParseDuration(strings.TrimSpace(spread)); err != nil || jitter < 0 {
			return 0, 0, fmt.Errorf("delay %q: want a duration like 200ms±100ms", s)
		}
	}
	return delay, jitter, nil
}

// Validate checks a profile's ranges.
func (p Profile) Validate() error {
	for name, v := range map[string]float64{"loss": p.Loss, "duplicate": p.Duplicate, "reorder": p.Reorder} {
		if v < 0 || v > 1 || math.IsNaN(v) {
			return fmt.Errorf("%s %v: must be within 0..1", name, v)
		}
	}
	if p.Delay < 0 || p.Jitter < 0 || p.CutEvery < 0 || p.BlackholeEvery < 0 || p.BlackholeFor < 0 {
		return errors.New("durations must not be negative")
	}
	if p.BlackholeEvery > 0 && p.BlackholeFor == 0 {
		return errors.New("blackhole-every needs blackhole-for")
	}
	return nil
}

func (p Profile) String() string {
	return fmt.Sprintf("loss %.1f%%, duplicate %.1f%%, reorder %.1f%%, delay %s±%s, cut every ~%s, blackhole every ~%s for %s",
		100*p.Loss, 100*p.Duplicate, 100*p.Reorder, p.Delay, p.Jitter, orOff(p.CutEvery), orOff(p.BlackholeEvery), p.BlackholeFor)
}

func orOff(d time.Duration) string {
	if d == 0 {
		return "never"
	}
	return d.String()
}

// Stats counts what the proxy did.
type Stats struct {
	Connections, Frames, Dropped, Duplicated, Reordered, Cuts, Blackholes atomic.Int64
}

// Snapshot is a copy of Stats.
type Snapshot struct {
	Connections, Frames, Dropped, Duplicated, Reordered, Cuts, Blackholes int64
}

func (s Snapshot) String() string {
	return fmt.Sprintf("%d connections, %d frames: %d dropped, %d duplicated, %d reordered; %d cuts, %d blackholes",
		s.Connections, s.Frames, s.Dropped, s.Duplicated, s.Reordered, s.Cuts, s.Blackholes)
}

// MaxMessageBytes is the largest frame relayed (API Gateway's limit).
const MaxMessageBytes = 128 << 10

// Proxy relays WebSocket connections to Upstream through a profile.
type Proxy struct {
	// Upstream is the API's WebSocket URL; a client's query string (token,
	// deviceId) and Authorization header are passed on.
	Upstream string
	// Seed makes the faults reproducible.
	Seed uint64
	// Log receives one line per fault episode (slog.Default when nil).
	Log *slog.Logger

	profile atomic.Pointer[Profile]
	stats   Stats
	conns   atomic.Uint64
	mu      sync.Mutex
	links   map[*link]bool
}

// New returns a proxy to upstream with profile p.
func New(upstream string, p Profile, seed uint64) *Proxy {
	x := &Proxy{Upstream: upstream, Seed: seed}
	x.SetProfile(p)
	return x
}

// SetProfile changes the network for frames from now on.
func (x *Proxy) SetProfile(p Profile) { x.profile.Store(&p) }

// Profile returns the current network.
func (x *Proxy) Profile() Profile {
	if p := x.profile.Load(); p != nil {
		return *p
	}
	return Profile{}
}

// Stats returns the counts so far.
func (x *Proxy) Stats() Snapshot {
	s := &x.stats
	return Snapshot{s.Connections.Load(), s.Frames.Load(), s.Dropped.Load(), s.Duplicated.Load(), s.Reordered.Load(), s.Cuts.Load(), s.Blackholes.Load()}
}

// log is the proxy's logger (Log, or slog's default).
func (x *Proxy) log() *slog.Logger { return cmp.Or(x.Log, slog.Default()) }

// CutAll cuts every open connection at once (a reconnect storm).
func (x *Proxy) CutAll() int {
	x.mu.Lock()
	links := make([]*link, 0, len(x.links))
	for l := range x.links {
		links = append(links, l)
	}
	x.mu.Unlock()
	for _, l := range links {
		l.cut("cut by CutAll")
	}
	return len(links)
}

// ServeHTTP accepts a client's WebSocket, dials upstream and relays.
func (x *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := x.conns.Add(1)
	target, err := url.Parse(x.Upstream)
	if err != nil {
		http.Error(w, "bad upstream", http.StatusBadGateway)
		return
	}
	if r.URL.RawQuery != "" {
		target.RawQuery = r.URL.RawQuery
	}
	h := http.Header{}
	if a := r.Header.Get("Authorization"); a != "" {
		h.Set("Authorization", a)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	up, resp, err := websocket.Dial(ctx, target.String(), &websocket.DialOptions{HTTPHeader: h})
	cancel()
	if err != nil {
		status := http.StatusBadGateway
		if resp != nil && resp.StatusCode >= 400 {
			status = resp.StatusCode // 401/403 from the authorizer pass through
		}
		http.Error(w, http.StatusText(status), status)
		return
	}
	down, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		up.CloseNow()
		return
	}
	up.SetReadLimit(MaxMessageBytes + 1)
	down.SetReadLimit(MaxMessageBytes + 1)
	x.stats.Connections.Add(1)
	l := &link{x: x, n: n, up: up, down: down, done: make(chan struct{}), rngs: map[string]*rand.Rand{
		"up":       rand.New(rand.NewPCG(x.Seed, 3*n)),
		"down":     rand.New(rand.NewPCG(x.Seed, 3*n+1)),
		"episodes": rand.New(rand.NewPCG(x.Seed, 3*n+2)),
	}}
	x.mu.Lock()
	if x.links == nil {
		x.links = map[*link]bool{}
	}
	x.links[l] = true
	x.mu.Unlock()
	l.run()
	x.mu.Lock()
	delete(x.links, l)
	x.mu.Unlock()
}

// link is one relayed connection.
type link struct {
	x        *Proxy
	n        uint64
	up, down *websocket.Conn
	// One generator per direction and one for episodes: each direction's
	// fate sequence depends only on the seed and its own frames.
	mu   sync.Mutex // guards the generators
	rngs map[string]*rand.Rand
	dark atomic.Bool // blackholed
	once sync.Once
	done chan struct{}
}

func (l *link) float(stream string) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rngs[stream].Float64()
}

// after draws an exponentially distributed wait with the given mean.
func (l *link) after(mean time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(l.rngs["episodes"].ExpFloat64() * float64(mean))
}

func (l *link) delay(p Profile, dir string) time.Duration {
	if p.Jitter == 0 {
		return p.Delay
	}
	return max(0, p.Delay+time.Duration((l.float(dir)*2-1)*float64(p.Jitter)))
}

func (l *link) cut(why string) {
	l.once.Do(func() {
		l.x.log().Info("netem: connection cut", "conn", l.n, "why", why)
		l.up.CloseNow()
		l.down.CloseNow()
		close(l.done)
	})
}

func (l *link) run() {
	go l.episodes()
	var wg sync.WaitGroup
	wg.Go(func() { l.pump(l.down, l.up, "up") })
	wg.Go(func() { l.pump(l.up, l.down, "down") })
	wg.Wait()
}

// episodes cuts and blackholes the link at random times.
func (l *link) episodes() {
	for {
		p := l.x.Profile()
		next, blackhole := time.Duration(-1), false
		if p.CutEvery > 0 {
			next = l.after(p.CutEvery)
		}
		if p.BlackholeEvery > 0 {
			if b := l.after(p.BlackholeEvery); next < 0 || b < next {
				next, blackhole = b, true
			}
		}
		if next < 0 {
			next = time.Second // the profile may change: look again
		}
		select {
		case <-l.done:
			return
		case <-time.After(next):
		}
		p = l.x.Profile()
		switch {
		case blackhole && p.BlackholeEvery > 0:
			// Dark before counted: a reader of the count may rely on it.
			l.dark.Store(true)
			l.x.stats.Blackholes.Add(1)
			l.x.log().Info("netem: connection blackholed (half-open)", "conn", l.n, "for", p.BlackholeFor.String())
			select {
			case <-l.done:
				return
			case <-time.After(p.BlackholeFor):
			}
			l.x.stats.Cuts.Add(1)
			l.cut("blackhole ended")
			return
		case !blackhole && p.CutEvery > 0:
			l.x.stats.Cuts.Add(1)
			l.cut("random cut")
			return
		}
	}
}

// frame is one frame scheduled for delivery.
type frame struct {
	typ  websocket.MessageType
	data []byte
	at   time.Time
}

// pump relays frames from src to dst through the profile: a reader
// decides each frame's fate, a writer delivers in schedule order.
func (l *link) pump(src, dst *websocket.Conn, dir string) {
	defer l.cut(dir + " side closed")
	queue := make(chan frame, 1024)
	go func() {
		for f := range queue {
			if d := time.Until(f.at); d > 0 {
				select {
				case <-l.done:
					return
				case <-time.After(d):
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := dst.Write(ctx, f.typ, f.data)
			cancel()
			if err != nil {
				l.cut(dir + " write failed")
				return
			}
		}
	}()
	defer close(queue)
	var (
		last time.Time // keeps a direction's frames in order
		held *frame    // a frame reordered behind the next one
	)
	emit := func(f frame) {
		select {
		case queue <- f:
		case <-l.done:
		}
	}
	type read struct {
		typ  websocket.MessageType
		data []byte
	}
	in := make(chan read)
	go func() {
		defer close(in)
		for {
			typ, data, err := src.Read(context.Background())
			if err != nil {
				return
			}
			select {
			case in <- read{typ, data}:
			case <-l.done:
				return
			}
		}
	}()
	for {
		var release <-chan time.Time
		if held != nil {
			// A held frame waits for the next one at most a second.
			release = time.After(time.Second)
		}
		var r read
		select {
		case got, ok := <-in:
			if !ok {
				return
			}
			r = got
		case <-release:
			emit(*held)
			held = nil
			continue
		}
		typ, data := r.typ, r.data
		l.x.stats.Frames.Add(1)
		p := l.x.Profile()
		if l.dark.Load() {
			l.x.stats.Dropped.Add(1)
			continue
		}
		if p.Loss > 0 && l.float(dir) < p.Loss {
			l.x.stats.Dropped.Add(1)
			continue
		}
		at := time.Now().Add(l.delay(p, dir))
		if at.Before(last) {
			at = last
		}
		last = at
		f := frame{typ: typ, data: data, at: at}
		if held == nil && p.Reorder > 0 && l.float(dir) < p.Reorder {
			l.x.stats.Reordered.Add(1)
			held = &f
			continue
		}
		emit(f)
		if held != nil {
			h := *held
			h.at = at
			emit(h)
			held = nil
		}
		if p.Duplicate > 0 && l.float(dir) < p.Duplicate {
			l.x.stats.Duplicated.Add(1)
			emit(f)
		}
	}
}
