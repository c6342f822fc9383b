package wire

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"strings"
	"testing"

	"github.com/signet-im/signet/shared/im"
)

// declared returns the names of the package-level identifiers of file that
// start with prefix.
func declared(t *testing.T, file, prefix string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range g.Specs {
			if v, ok := spec.(*ast.ValueSpec); ok {
				for _, n := range v.Names {
					if strings.HasPrefix(n.Name, prefix) {
						out = append(out, n.Name)
					}
				}
			}
		}
	}
	return out
}

// Issue 13: one error table serves both APIs. Every domain error has a
// wire code (the WebSocket error frame) and through it an HTTP status (the
// alerts API), except the two that handlers act on where they arise.
func TestEveryDomainErrorHasACodeAndAStatus(t *testing.T) {
	t.Parallel()
	all := map[string]error{
		"ErrNotDirect": im.ErrNotDirect, "ErrMalformedConversation": im.ErrMalformedConversation, "ErrNotMember": im.ErrNotMember,
		"ErrClientMsgIDReused": im.ErrClientMsgIDReused, "ErrReadBeyondHead": im.ErrReadBeyondHead, "ErrAckBeyondHead": im.ErrAckBeyondHead,
		"ErrCursorBeyondHead": im.ErrCursorBeyondHead, "ErrContention": im.ErrContention, "ErrRateLimited": im.ErrRateLimited,
		"ErrNotFound": im.ErrNotFound, "ErrIdempotencyConflict": im.ErrIdempotencyConflict, "ErrAppExists": im.ErrAppExists,
		"ErrGone": im.ErrGone, "ErrForbidden": im.ErrForbidden, "ErrGroupFull": im.ErrGroupFull, "ErrLastOwner": im.ErrLastOwner,
		"ErrNoSuchGroup": im.ErrNoSuchGroup, "ErrGroupExists": im.ErrGroupExists, "ErrAlreadyAnswered": im.ErrAlreadyAnswered,
		"ErrEndpointDisabled": im.ErrEndpointDisabled, "ErrDeviceLimit": im.ErrDeviceLimit, "ErrDeviceHoldsDelivered": im.ErrDeviceHoldsDelivered,
		"ErrAlreadyCreated": im.ErrAlreadyCreated,
	}
	internal := map[string]bool{"ErrNotFound": true, "ErrGone": true, "ErrEndpointDisabled": true, "ErrAlreadyCreated": true} // see domainCodes
	for _, name := range declared(t, "../im/errors.go", "Err") {
		err, ok := all[name]
		if !ok {
			t.Errorf("im.%s is new: give it a row in domainCodes (or say why it is internal) and list it here", name)
			continue
		}
		p := ProblemOf(errors.Join(errors.New("context"), err))
		status := HTTPStatus(p.Code)
		switch {
		case internal[name] && p.Code != CodeInternal:
			t.Errorf("im.%s answers %s; it is acted on where it arises and must stay internal", name, p.Code)
		case !internal[name] && (p.Code == CodeInternal || status == http.StatusInternalServerError):
			t.Errorf("im.%s has no code of its own (%s, HTTP %d)", name, p.Code, status)
		case !internal[name] && p.Msg == "":
			t.Errorf("im.%s has no message", name)
		}
	}
}

// Every code a client can be sent has the HTTP status its errors take.
func TestEveryCodeHasAnHTTPStatus(t *testing.T) {
	t.Parallel()
	names := declared(t, "errors.go", "Code")
	if len(names) < 12 {
		t.Fatalf("found %d codes in errors.go: %v", len(names), names)
	}
	if len(httpStatus) != len(names) {
		t.Errorf("%d codes (%v), %d with an HTTP status", len(names), names, len(httpStatus))
	}
	for code, status := range httpStatus {
		if status < 400 || status > 599 {
			t.Errorf("%s: HTTP %d is not an error status", code, status)
		}
	}
}
