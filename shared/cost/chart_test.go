package cost

import (
	"encoding/xml"
	"strings"
	"testing"
)

func TestChartDrawsEachComponentAndTheAnchors(t *testing.T) {
	t.Parallel()
	a := Usage{Scenario: "chat-1dev", Delivered: 100, WebSocketMessages: 700, WriteUnits: 4000, LambdaRequests: 350}.Price(ListPrices)
	b := Usage{Scenario: "chat-2dev", Delivered: 100, WebSocketMessages: 1200, WriteUnits: 5000}.Price(ListPrices)
	var out strings.Builder
	if err := Chart(&out, "cost <test>", []Priced{a, b}, Anchors); err != nil {
		t.Fatal(err)
	}
	svg := out.String()
	dec := xml.NewDecoder(strings.NewReader(svg))
	rects, titles := 0, []string{}
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
		if cd, ok := tok.(xml.CharData); ok {
			titles = append(titles, string(cd))
		}
	}
	text := strings.Join(titles, "|")
	// Segments: 3 non-zero components for a, 2 for b; plus a legend swatch per component.
	if want := 3 + 2 + len(a.Lines); rects != want {
		t.Errorf("%d rects, want %d", rects, want)
	}
	for _, want := range []string{"cost <test>", "chat-1dev", "chat-2dev", "AWS chat sample ($10)", "bare send + push ($2)", "DynamoDB write units: $25.00", "$32.70"} {
		if !strings.Contains(text, want) {
			t.Errorf("chart lacks %q:\n%s", want, svg)
		}
	}
}
