package cost

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestPriceDividesEachComponentByTheDeliveredMessages(t *testing.T) {
	t.Parallel()
	u := Usage{Scenario: "s", Delivered: 1000, WebSocketMessages: 7000, LambdaRequests: 4000, LambdaGBSeconds: 10,
		WriteUnits: 40000, ReadUnits: 11000, SQSRequests: 5000, StoredGBMonths: 0.02, LogBytes: 3_000_000, ConnectionMinutes: 60}
	p := u.Price(ListPrices)
	want := map[string]float64{
		"API Gateway messages":                7,   // 7 per message at $1/M
		"Lambda requests":                     0.8, // 4 at $0.20/M
		"Lambda GB-seconds":                   10.0 / 1000 * 0.0000133334 * 1e6,
		"DynamoDB write units":                25,                       // 40 at $0.625/M
		"DynamoDB read units":                 1.375,                    // 11 at $0.125/M
		"SQS requests":                        2,                        // 5 at $0.40/M
		"DynamoDB storage + PITR (GB-months)": 0.02 / 1000 * 0.45 * 1e6, // $9 per million
		"CloudWatch Logs (GB)":                3e-3 / 1000 * 0.5 * 1e6,  // 3 KB a message
		"API Gateway connection minutes":      60.0 / 1000 * 0.25,
	}
	total := 0.0
	for _, l := range p.Lines {
		w, ok := want[l.Component]
		if !ok {
			t.Errorf("unexpected component %q", l.Component)
			continue
		}
		if math.Abs(l.PerMillion-w) > 1e-9 {
			t.Errorf("%s: $%.6f per million, want $%.6f", l.Component, l.PerMillion, w)
		}
		total += w
	}
	if len(p.Lines) != len(want) || math.Abs(p.PerMillion-total) > 1e-9 {
		t.Errorf("%d lines, total $%.4f; want %d, $%.4f", len(p.Lines), p.PerMillion, len(want), total)
	}
	var b bytes.Buffer
	p.Print(&b)
	if !strings.Contains(b.String(), "s: 1000 × message") || !strings.Contains(b.String(), "total") {
		t.Errorf("table:\n%s", b.String())
	}
}

// Units spent on Standard-IA tables count in their line's units (a
// per-message goal counts them all) and are priced at that class.
func TestStandardIAIsPricedApart(t *testing.T) {
	t.Parallel()
	all := Usage{Scenario: "s", Delivered: 1000, WriteUnits: 4000, ReadUnits: 1000, StoredGBMonths: 0.02}.Price(ListPrices)
	ia := Usage{Scenario: "s", Delivered: 1000, WriteUnits: 4000, ReadUnits: 1000, StoredGBMonths: 0.02,
		WriteUnitsIA: 1000, ReadUnitsIA: 1000, StoredGBMonthsIA: 0.01}.Price(ListPrices)
	line := func(pr Priced, c string) Line {
		for _, l := range pr.Lines {
			if l.Component == c {
				return l
			}
		}
		t.Fatalf("no line %q", c)
		return Line{}
	}
	want := map[string]float64{
		"DynamoDB write units":                (3000*0.625 + 1000*0.78125) / 1000,
		"DynamoDB read units":                 1000 * 0.15625 / 1000,
		"DynamoDB storage + PITR (GB-months)": (0.01*0.45 + 0.01*0.30) / 1000 * 1e6,
	}
	for c, usd := range want {
		l := line(ia, c)
		if math.Abs(l.PerMillion-usd) > 1e-9 {
			t.Errorf("%s: $%.6f per million, want $%.6f", c, l.PerMillion, usd)
		}
		if l.Units != line(all, c).Units {
			t.Errorf("%s: %v units, want all of them (%v)", c, l.Units, line(all, c).Units)
		}
	}
	sum := 0.0
	for _, l := range ia.Lines {
		sum += l.PerMillion
	}
	if math.Abs(sum-ia.PerMillion) > 1e-9 {
		t.Errorf("total $%.6f, lines add to $%.6f", ia.PerMillion, sum)
	}
}

// A scaled run scales every count, the per-call splits too, and the calls
// are printed per delivered unit, the largest first.
func TestScaleAndPrintCalls(t *testing.T) {
	t.Parallel()
	u := Usage{Scenario: "idle", Delivered: 2, Unit: "device-day", WriteUnits: 3, LambdaRequests: 2,
		Invocations:      map[string]int64{"PingFunction": 2},
		Calls:            map[string]float64{"DynamoDB.UpdateItem": 2, "DynamoDB.Query": 4},
		WriteUnitsByCall: map[string]float64{"UpdateItem ConnectionsTable": 3},
		ReadUnitsByCall:  map[string]float64{"Query ConnectionsTable": 1, "GetItem InboxTable": 5}}
	u.Scale(10)
	if u.WriteUnits != 30 || u.LambdaRequests != 20 || u.Invocations["PingFunction"] != 20 ||
		u.Calls["DynamoDB.Query"] != 40 || u.WriteUnitsByCall["UpdateItem ConnectionsTable"] != 30 || u.ReadUnitsByCall["GetItem InboxTable"] != 50 {
		t.Fatalf("scaled by 10: %+v", u)
	}
	var b bytes.Buffer
	u.Price(ListPrices).PrintCalls(&b)
	out := b.String()
	for _, want := range []string{"AWS calls per device-day:", "DynamoDB.Query", "20.00", "UpdateItem ConnectionsTable", "15.00", "GetItem InboxTable", "25.00"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Index(out, "DynamoDB.Query") > strings.Index(out, "DynamoDB.UpdateItem") ||
		strings.Index(out, "GetItem InboxTable") > strings.Index(out, "Query ConnectionsTable") {
		t.Errorf("not largest first:\n%s", out)
	}
}
