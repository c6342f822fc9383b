package cost

import (
	"bytes"
	"strings"
	"testing"
)

func TestCheckReportsGoalsMetAndFiguresPastTheirCeilings(t *testing.T) {
	t.Parallel()
	// 7 API Gateway messages, 4 invocations, 40 WRU, 5 SQS requests per
	// message: $34.80 per million (no storage, logs or GB-seconds).
	u := Usage{Scenario: "chat-1dev", Delivered: 1000, WebSocketMessages: 7000, LambdaRequests: 4000,
		WriteUnits: 40000, SQSRequests: 5000}
	pr := u.Price(ListPrices)
	bounds := []Bound{
		{Figure: "total", Goal: 10, Ceiling: 35},                              // 34.8: under the ceiling, goal not met
		{Figure: "API Gateway messages", PerUnit: true, Goal: 8, Ceiling: 9},  // 7: goal met
		{Figure: "DynamoDB write units", PerUnit: true, Goal: 6, Ceiling: 39}, // 40: regressed
		{Figure: "renamed component", PerUnit: true, Ceiling: 1},              // missing: regressed
	}
	vs := Check(pr, bounds)
	if len(vs) != 4 {
		t.Fatalf("%d verdicts, want 4", len(vs))
	}
	want := []struct{ met, regressed bool }{{false, false}, {true, false}, {false, true}, {false, true}}
	for i, v := range vs {
		if v.GoalMet != want[i].met || v.Regressed != want[i].regressed {
			t.Errorf("%s: value %.3f goal met %v regressed %v, want %v %v", v.Figure, v.Value, v.GoalMet, v.Regressed, want[i].met, want[i].regressed)
		}
	}
	if vs[1].Value != 7 || vs[2].Value != 40 {
		t.Errorf("per-unit values %.3f %.3f, want 7 40", vs[1].Value, vs[2].Value)
	}
	var b bytes.Buffer
	if !PrintVerdicts(&b, vs) {
		t.Error("PrintVerdicts reported no regression")
	}
	if got := Regressions(vs); !strings.Contains(got, "DynamoDB write units 40.00 > 39") || !strings.Contains(got, "renamed component") {
		t.Errorf("regressions %q", got)
	}
	if PrintVerdicts(&b, vs[:2]) {
		t.Error("PrintVerdicts reported a regression where none is")
	}
}

func TestEveryScenarioHasAGoalOrACeilingAboveIt(t *testing.T) {
	t.Parallel()
	for name, bounds := range Goals {
		if len(bounds) == 0 {
			t.Errorf("%s: no bounds", name)
		}
		for _, b := range bounds {
			if b.Ceiling <= 0 || b.Goal > b.Ceiling {
				t.Errorf("%s %s: goal %v ceiling %v (a ceiling is today's figure, at or above the goal)", name, b.Figure, b.Goal, b.Ceiling)
			}
		}
	}
}
