package app

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/signet-im/signet/shared/handler"
)

// Each functions/<name>/main.go starts the template function it names with
// the very method the local stack runs for it (Functions): a main that
// named another use case's method would pass every end-to-end test, which
// run Functions, and fail only in AWS.
func TestEveryMainRunsItsFunctionsMethod(t *testing.T) {
	t.Parallel()
	mains, err := filepath.Glob("../../functions/*/main.go")
	if err != nil || len(mains) == 0 {
		t.Fatalf("no functions/*/main.go (%v)", err)
	}
	start := regexp.MustCompile(`(?:app|sdkfree)\.Start\("(\w+)", (?:func\(d \*handler\.Deps\) any \{ return d\.(\w+)\(\)\.(\w+) \}|app\.(\w+))`)
	deps := reflect.TypeOf(&handler.Deps{})
	fns := Functions(&handler.Deps{})
	seen := map[string]bool{}
	for _, m := range mains {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		g := start.FindStringSubmatch(string(b))
		if g == nil {
			t.Errorf("%s: no app.Start (or sdkfree.Start) of \"<Function>\" with func(d *handler.Deps) any { return d.<UseCase>().<Method> }, nor app.Start(\"<Function>\", app.<Consumer>)", m)
			continue
		}
		id, builder, method, consumer := g[1], g[2], g[3], g[4]
		seen[id] = true
		runs, ok := fns[id]
		if !ok {
			t.Errorf("%s starts %s, which Functions does not have", m, id)
			continue
		}
		if consumer != "" {
			// The queue consumers: Functions runs app.Redeliver(d) and
			// app.Fanout(d), each a queue.Consumer's Lambda method, told
			// apart by their code (instances of one generic method).
			c, ok := map[string]func(*handler.Deps) any{"Redeliver": Redeliver, "Fanout": Fanout, "Hints": Hints}[consumer]
			if !ok {
				t.Errorf("%s: app.%s is not a consumer", m, consumer)
			} else if reflect.ValueOf(c(&handler.Deps{})).Pointer() != reflect.ValueOf(runs).Pointer() {
				t.Errorf("%s: main runs app.%s, the local stack another consumer", id, consumer)
			}
			continue
		}
		bm, ok := deps.MethodByName(builder)
		if !ok {
			t.Errorf("%s: Deps has no %s", m, builder)
			continue
		}
		want := "(*" + bm.Type.Out(0).Elem().Name() + ")." + method + "-fm"
		if got := runtime.FuncForPC(reflect.ValueOf(runs).Pointer()).Name(); !strings.HasSuffix(got, want) {
			t.Errorf("%s: main runs %s, the local stack %s", id, want, got)
		}
	}
	for id := range fns {
		if !seen[id] {
			t.Errorf("no functions/<name>/main.go starts %s", id)
		}
	}
}
