package cost

import (
	"fmt"
	"io"
	"strings"
)

// A Bound is one figure of a scenario held against issue 12: the goal it
// must reach, and the ceiling it may not regress past. Ceilings are today's
// figures (at the benchmark's default sizes) plus a margin for the
// GB-second line, which is timed; each change that lowers a figure lowers
// its ceiling, until ceiling and goal meet.
type Bound struct {
	Figure  string  // "total" or a component's Line.Component
	PerUnit bool    // the bound is on units per delivered unit, not dollars per million
	Goal    float64 // 0: none stated (the figure is to be cut, not to a number)
	Ceiling float64
}

// Goals are the bounds of each scenario of `signet bench cost`, keyed by
// scenario name. Dollars are per million delivered units (messages, group
// messages, logins, device-days).
var Goals = map[string][]Bound{
	// Since the fifteenth session chat pace is what issue 12 calls it,
	// every message acked alone (the benchmark had paced messages inside
	// the SDK's 2 s ack window, which made them bursts): the 1:1 and group
	// ceilings were raised to what that measures, not because a lever was
	// undone. burst-1dev is the shape the old figures described. Then the
	// delivered watermark derived (no write per ack: 1:1 in the fifteenth
	// session, groups in the sixteenth) lowered them again, and the ack
	// range riding on the cursor item (1.25 write units per ack instead of
	// 2, seventeenth) the 1:1 ones.
	"chat-1dev": {
		{Figure: "total", Goal: 10, Ceiling: 16.5},
		{Figure: "API Gateway messages", PerUnit: true, Goal: 2.5, Ceiling: 5.3},
		// Invocations and SQS requests hold a timed part at this size:
		// how many redelivery checks one receive finds (4 pairs make
		// batches of 1–3). Seventeenth session, five runs: SQS 1.88–2.50,
		// invocations 2.42–2.73 per message, with the same code. Fortieth
		// session: SQS 1.98–2.06 alone on an idle machine, 2.40–2.47 in
		// CI's three lanes here (the code before and after that session's
		// changes alike), and 2.78 with invocations 2.87 in one clean-clone
		// CI run, which failed the gate at 2.7: the ceilings of the two
		// timed figures now leave room for a loaded machine (a change that
		// adds an SQS request or an invocation per message still fails
		// them, and the total's ceiling is unchanged).
		{Figure: "Lambda requests", PerUnit: true, Goal: 1.2, Ceiling: 3.1},
		{Figure: "DynamoDB write units", PerUnit: true, Goal: 6, Ceiling: 7.0},
		{Figure: "SQS requests", PerUnit: true, Goal: 1.3, Ceiling: 3.0},
	},
	"chat-2dev":  {{Figure: "total", Goal: 14, Ceiling: 24.5}},
	"burst-1dev": {{Figure: "total", Ceiling: 14}},
	// The group scenarios meter from after the members' connect-time
	// presence has run (eighteenth session; it was in the window: ~$70 of
	// $1165). Their groups are read-diffused, the default since the
	// twentieth session; the fan-out reads the group's online index (one
	// Query) instead of each member's connections, and acks bring back the
	// proof of their position (no read of the log): $654 → $607 and
	// $232 → $197 per million, read units per group message 438 → 127 and
	// 298 → 46 (without either, the read-unit ceilings fail). The -write
	// ones are the same groups written into every inbox (GroupDelivery
	// write), held to what they measured before the default changed.
	// Twentieth session: 200 pushes per fan-out invocation (one job and
	// check where four were) and ownFromSent (the sender's own message in
	// "sent", not pushed back): $607 → $599 and $197 → $191.
	"group-online": {
		{Figure: "total", Goal: 600, Ceiling: 615},
		{Figure: "DynamoDB read units", PerUnit: true, Ceiling: 140},
	},
	"group-30pct": {
		{Figure: "total", Goal: 200, Ceiling: 205},
		{Figure: "DynamoDB read units", PerUnit: true, Ceiling: 55},
	},
	"group-online-write": {{Figure: "total", Ceiling: 1150}},
	"group-30pct-write":  {{Figure: "total", Ceiling: 700}},
	"login":              {{Figure: "total", Goal: 30, Ceiling: 30}},
	// A login as the web console makes it (sixteenth session): the issue's
	// login goal is for the sync of the waiting messages; the console's
	// summary and presence query cost ~$5 per million logins more.
	"login-console": {{Figure: "total", Ceiling: 35}},
	// The login from a device the user never connected before (twenty-ninth
	// session): its $connect admits it under the device limit — a second
	// read of the user's devices, the device version, and a transaction of
	// its cursor item and the version (~$2 per million logins more).
	"login-new-device": {{Figure: "total", Ceiling: 33}},
	"idle-day":         {{Figure: "total", Ceiling: 800}},
}

// Verdict is one bound checked against a run.
type Verdict struct {
	Scenario  string  `json:"scenario"`
	Figure    string  `json:"figure"`
	PerUnit   bool    `json:"perUnit"`
	Value     float64 `json:"value"`
	Goal      float64 `json:"goal,omitempty"`
	Ceiling   float64 `json:"ceiling"`
	GoalMet   bool    `json:"goalMet"`
	Regressed bool    `json:"regressed"` // above the ceiling
}

// Check holds a priced scenario against its bounds. A bound whose figure
// the scenario does not have is reported as regressed (a renamed component
// must not silently escape its ceiling).
func Check(pr Priced, bounds []Bound) []Verdict {
	var out []Verdict
	for _, b := range bounds {
		v := Verdict{Scenario: pr.Scenario, Figure: b.Figure, PerUnit: b.PerUnit, Goal: b.Goal, Ceiling: b.Ceiling}
		value, ok := pr.figure(b)
		v.Value = value
		v.Regressed = !ok || value > b.Ceiling
		v.GoalMet = ok && b.Goal > 0 && value <= b.Goal
		out = append(out, v)
	}
	return out
}

func (pr Priced) figure(b Bound) (float64, bool) {
	if b.Figure == "total" && !b.PerUnit {
		return pr.PerMillion, true
	}
	for _, l := range pr.Lines {
		if l.Component == b.Figure {
			if b.PerUnit {
				return l.PerMessage, true
			}
			return l.PerMillion, true
		}
	}
	return 0, false
}

// PrintVerdicts writes the verdicts as a table and reports whether any
// figure regressed past its ceiling.
func PrintVerdicts(w io.Writer, vs []Verdict) (regressed bool) {
	fmt.Fprintf(w, "  %-18s %-38s %12s %12s %12s  %s\n", "scenario", "figure", "value", "goal", "ceiling", "")
	for _, v := range vs {
		figure := v.Figure
		if v.PerUnit {
			figure += " (per unit)"
		} else {
			figure = "$ per 1M, " + figure
		}
		goal, state := "-", "to be cut"
		if v.Goal > 0 {
			goal, state = number(v.Goal), "goal not met"
		}
		if v.GoalMet {
			state = "goal met"
		}
		if v.Regressed {
			state = "REGRESSED past its ceiling"
			regressed = true
		}
		fmt.Fprintf(w, "  %-18s %-38s %12s %12s %12s  %s\n", v.Scenario, figure, number(round2(v.Value)), goal, number(v.Ceiling), state)
	}
	return regressed
}

// Regressions names the verdicts above their ceilings.
func Regressions(vs []Verdict) string {
	var parts []string
	for _, v := range vs {
		if v.Regressed {
			parts = append(parts, fmt.Sprintf("%s %s %.2f > %s", v.Scenario, v.Figure, v.Value, number(v.Ceiling)))
		}
	}
	return strings.Join(parts, "; ")
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }
