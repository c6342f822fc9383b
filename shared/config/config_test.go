package config

import (
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/signet-im/signet/shared/im"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Pins the production defaults (DESIGN invariant 6 and the numbers).
func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.MemberLimit != 500 || c.FanoutBatch != 50 || c.HistoryRetention != 365*24*time.Hour || c.PresenceStale != 27*time.Minute || c.PresenceDebounce != 2*time.Second {
		t.Errorf("group/presence defaults: %+v", c)
	}
	if c.Redelivery.PushTimeout != 5*time.Second || c.InboxRetention != 30*24*time.Hour || c.SyncInterval != 2*time.Second {
		t.Fatalf("defaults = %+v", c)
	}
	if diff := cmp.Diff([]time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}, c.Redelivery.Backoff); diff != "" {
		t.Fatal(diff)
	}
}

func TestLoadOverridesAndErrors(t *testing.T) {
	t.Parallel()
	c, err := Load(env(map[string]string{EnvPushTimeout: "1", EnvBackoff: "1s, 500ms", EnvInboxRetention: "7d", EnvInboxTable: "in"}))
	if err != nil || c.Redelivery.PushTimeout != time.Second || len(c.Redelivery.Backoff) != 2 || c.InboxRetention != 7*24*time.Hour || c.InboxTable != "in" {
		t.Fatalf("config = %+v, %v", c, err)
	}
	for name, e := range map[string]map[string]string{
		"bad duration":    {EnvPushTimeout: "soon"},
		"window too big":  {EnvBackoff: "30s,30s"},
		"negative":        {EnvSyncInterval: "-1s"},
		"history < inbox": {EnvHistoryRetention: "10d"},
		"zero members":    {EnvMemberLimit: "0"},
		"bad batch":       {EnvFanoutBatch: "many"},
		"bad log level":   {EnvLogLevel: "loud"},
	} {
		if _, err := Load(env(e)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if c.LogLevel != slog.LevelInfo {
		t.Errorf("default log level %v, want info", c.LogLevel)
	}
	if d, err := Load(env(map[string]string{EnvLogLevel: "debug"})); err != nil || d.LogLevel != slog.LevelDebug {
		t.Errorf("SIGNET_LOG_LEVEL=debug: %v, %v", d.LogLevel, err)
	}
	if err := c.Require(EnvInboxTable, EnvPushTimeout); err != nil {
		t.Errorf("require set/defaulted: %v", err)
	}
	if err := c.Require(EnvMessagesTable); err == nil {
		t.Error("require missing table: accepted")
	}
}

// The redelivery policy's defaults are written twice, as configuration
// (Vars, which the template's defaults match) and as the domain's
// DefaultRedelivery (the SDK's and tests' reference): they must agree.
func TestTheDefaultRedeliveryIsTheConfiguredDefault(t *testing.T) {
	t.Parallel()
	c, err := Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Redelivery, im.DefaultRedelivery()) {
		t.Errorf("configured default %+v, im.DefaultRedelivery %+v", c.Redelivery, im.DefaultRedelivery())
	}
}
