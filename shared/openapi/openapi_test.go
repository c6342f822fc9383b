package openapi

import (
	"strings"
	"testing"

	"github.com/signet-im/signet"
)

func TestAlertRequestSchemaFromTheDocument(t *testing.T) {
	t.Parallel()
	v, err := Load(signet.OpenAPI, "AlertRequest", "AppRequest")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		body string
		ok   bool
		want string
	}{
		{`{"to":["bob"],"title":"t","body":"b","priority":"urgent","ttlSeconds":600}`, true, ""},
		{`{"to":["bob"],"title":"t","body":"b","extra":1}`, false, "additional"},
		{`{"to":[],"title":"t","body":"b"}`, false, "/to"},
		{`{"to":["bob","bob"],"title":"t","body":"b"}`, false, "/to"},
		{`{"to":["a:b"],"title":"t","body":"b"}`, false, "/to/0"},
		{`{"to":["bob"],"title":"","body":"b"}`, false, "/title"},
		{`{"to":["bob"],"title":"t","body":"b","priority":"asap"}`, false, "/priority"},
		{`{"to":["bob"],"title":"t"}`, false, "body"},
		{`[1]`, false, ""},
		{`{`, false, "JSON"},
	}
	for _, tc := range cases {
		err := v.Validate("AlertRequest", []byte(tc.body))
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v", tc.body, err)
		}
	}
	if err := v.Validate("AppRequest", []byte(`{"name":"ops","allowUsers":["*","bob"]}`)); err != nil {
		t.Errorf("app request: %v", err)
	}
}
