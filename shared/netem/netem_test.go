package netem

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// echo is an upstream that answers every frame with itself, and refuses
// connections without ?token=ok (as the authorizer would).
func echo(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("token") != "ok" {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, data, err := c.Read(context.Background())
			if err != nil {
				return
			}
			if err := c.Write(context.Background(), typ, data); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

func proxy(t *testing.T, p Profile, seed uint64) (*Proxy, string) {
	t.Helper()
	x := New(echo(t), p, seed)
	srv := httptest.NewServer(x)
	t.Cleanup(srv.Close)
	return x, "ws" + strings.TrimPrefix(srv.URL, "http")
}

// roundTrip sends n numbered frames through the proxy and returns the
// numbers that came back, in arrival order, once the line is quiet.
func roundTrip(t *testing.T, url string, n int) []int {
	t.Helper()
	ctx := context.Background()
	c, _, err := websocket.Dial(ctx, url+"?token=ok", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	got := make(chan int, 4*n)
	go func() {
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				close(got)
				return
			}
			v, _ := strconv.Atoi(string(data))
			got <- v
		}
	}()
	for i := range n {
		if err := c.Write(ctx, websocket.MessageText, []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	var out []int
	for {
		select {
		case v, ok := <-got:
			if !ok {
				return out
			}
			out = append(out, v)
		case <-time.After(2 * time.Second):
			return out
		}
	}
}

func TestPerfectNetworkRelaysEverythingInOrder(t *testing.T) {
	t.Parallel()
	_, url := proxy(t, Profiles["perfect"], 1)
	got := roundTrip(t, url, 200)
	want := make([]int, 200)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v", got)
	}
}

func TestFaultsAreSeededAndShowInStats(t *testing.T) {
	t.Parallel()
	p := Profile{Loss: 0.2, Duplicate: 0.1, Reorder: 0.1, Delay: time.Millisecond, Jitter: time.Millisecond}
	x1, url1 := proxy(t, p, 42)
	_, url2 := proxy(t, p, 42)
	_, url3 := proxy(t, p, 43)
	a, b, c := roundTrip(t, url1, 300), roundTrip(t, url2, 300), roundTrip(t, url3, 300)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different faults:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds injected the same faults")
	}
	s := x1.Stats()
	if s.Dropped == 0 || s.Duplicated == 0 || s.Reordered == 0 || s.Connections != 1 {
		t.Fatalf("stats %s", s)
	}
	seen, reordered := map[int]int{}, false
	for i, v := range a {
		seen[v]++
		if i > 0 && v < a[i-1] {
			reordered = true
		}
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	if len(seen) >= 300 || dups == 0 || !reordered {
		t.Fatalf("%d of 300 distinct frames came back, %d duplicates, reordered %v", len(seen), dups, reordered)
	}
}

func TestBlackholeIsHalfOpenThenCut(t *testing.T) {
	t.Parallel()
	x, url := proxy(t, Profile{BlackholeEvery: time.Millisecond, BlackholeFor: 500 * time.Millisecond}, 7)
	ctx := context.Background()
	c, _, err := websocket.Dial(ctx, url+"?token=ok", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	waitUntil(t, func() bool { return x.Stats().Blackholes == 1 })
	start := time.Now()
	// Writes still succeed (the socket is open) but nothing comes back,
	// until the cut ends the connection.
	if err := c.Write(ctx, websocket.MessageText, []byte("1")); err != nil {
		t.Fatalf("write into the blackhole: %v", err)
	}
	if _, data, err := c.Read(ctx); err == nil {
		t.Fatalf("read %q through a blackhole", data)
	}
	if x.Stats().Cuts != 1 || x.Stats().Dropped != 1 || time.Since(start) > 30*time.Second {
		t.Fatalf("stats %s", x.Stats())
	}
}

func TestUpstreamRefusalPassesThroughAndCutAll(t *testing.T) {
	t.Parallel()
	x, url := proxy(t, Profiles["perfect"], 1)
	_, resp, err := websocket.Dial(context.Background(), url+"?token=bad", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("refused upstream: %v %v", resp, err)
	}
	c, _, err := websocket.Dial(context.Background(), url+"?token=ok", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	waitUntil(t, func() bool { return x.CutAll() == 1 })
	if _, _, err := c.Read(context.Background()); err == nil {
		t.Fatal("connection survived CutAll")
	}
}

func TestParseDelayAndValidate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][2]time.Duration{"200ms": {200 * time.Millisecond, 0}, "200ms±100ms": {200 * time.Millisecond, 100 * time.Millisecond}, "1s+-5ms": {time.Second, 5 * time.Millisecond}} {
		d, j, err := ParseDelay(in)
		if err != nil || d != want[0] || j != want[1] {
			t.Errorf("ParseDelay(%q) = %s %s %v", in, d, j, err)
		}
	}
	for _, bad := range []string{"", "fast", "-1s", "1s±x"} {
		if _, _, err := ParseDelay(bad); err == nil {
			t.Errorf("ParseDelay(%q) accepted", bad)
		}
	}
	for _, p := range []Profile{{Loss: 1.5}, {Reorder: -0.1}, {BlackholeEvery: time.Second}} {
		if p.Validate() == nil {
			t.Errorf("profile %+v validated", p)
		}
	}
	for _, name := range ProfileNames() {
		if err := Profiles[name].Validate(); err != nil {
			t.Errorf("profile %s: %v", name, err)
		}
	}
	_ = fmt.Sprint(Profiles["subway"])
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
