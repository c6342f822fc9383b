package dynamo_test

import (
	"context"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

func TestPresencePushIsClaimedOnceUntilCleared(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	steps := []struct {
		name string
		do   func() (bool, error)
		want bool
	}{
		{"first claim", func() (bool, error) { return st.SchedulePresence(ctx, "alice", now, time.Minute) }, true},
		{"second claim while pending", func() (bool, error) { return st.SchedulePresence(ctx, "alice", now, time.Minute) }, false},
		{"claim after clear", func() (bool, error) {
			if err := st.ClearPresencePending(ctx, "alice"); err != nil {
				return false, err
			}
			return st.SchedulePresence(ctx, "alice", now, time.Minute)
		}, true},
		{"stuck claim is taken over", func() (bool, error) { return st.SchedulePresence(ctx, "alice", now.Add(2*time.Minute), time.Minute) }, true},
		{"first push is news", func() (bool, error) { return st.MarkPresencePushed(ctx, "alice", im.StatusOnline, now) }, true},
		{"same state is not", func() (bool, error) { return st.MarkPresencePushed(ctx, "alice", im.StatusOnline, now) }, false},
		{"another state is", func() (bool, error) { return st.MarkPresencePushed(ctx, "alice", im.StatusOffline, now) }, true},
	}
	for _, s := range steps {
		got, err := s.do()
		if err != nil || got != s.want {
			t.Fatalf("%s: %v, %v; want %v", s.name, got, err, s.want)
		}
	}
}
