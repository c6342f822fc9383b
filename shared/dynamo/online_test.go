package dynamo_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// The online index of read-diffused groups (online.go): a connection is
// listed in the groups it was indexed in until its record is removed —
// by $disconnect or as stale — or its TTL passes; only current members of
// read-diffused groups are named by ReadGroupsOf.
func TestOnlineIndexFollowsConnectionRecords(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now().Truncate(time.Millisecond)
	st.GroupReads = true
	g1, g2 := im.Group("on1"), im.Group("on2")
	groupWith(t, st, g1, []im.UserID{"bob", "carol"}, 0, now)
	groupWith(t, st, g2, []im.UserID{"bob"}, 0, now)
	removeMember(t, st, g2, "bob", now)
	st.GroupReads = false
	groupWith(t, st, im.Group("written"), []im.UserID{"bob"}, 0, now)

	groups, err := st.ReadGroupsOf(ctx, "bob")
	if err != nil || !slices.Equal(groups, []im.ConversationID{g1}) {
		t.Fatalf("bob's read-diffused groups = %v, %v; want [%s] (removed from %s; written isn't read-diffused)", groups, err, g1, g2)
	}

	conn := func(u im.UserID, id im.ConnectionID, at time.Time) im.Connection {
		return im.Connection{User: u, ID: id, Device: "phone", ConnectedAt: at, LastSeenAt: at}
	}
	online := func(c im.ConversationID, at time.Time) []string {
		t.Helper()
		cs, err := st.OnlineIn(ctx, c, at)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range cs {
			out = append(out, string(c.User)+"/"+string(c.ID)+"/"+string(c.Device))
		}
		slices.Sort(out)
		return out
	}
	// A connection whose record does not exist is not indexed.
	if ok, err := st.IndexOnline(ctx, conn("bob", "gone", now), []im.ConversationID{g1}); ok || err != nil {
		t.Fatalf("indexing a connection without a record: %v, %v", ok, err)
	}
	for _, c := range []im.Connection{conn("bob", "b1", now), conn("carol", "c1", now), conn("carol", "c2", now.Add(-time.Hour))} {
		if err := st.SaveConnection(ctx, c); err != nil {
			t.Fatal(err)
		}
		if ok, err := st.IndexOnline(ctx, c, []im.ConversationID{g1}); !ok || err != nil {
			t.Fatalf("index %s: %v, %v", c.ID, ok, err)
		}
	}
	if ok, err := st.IndexOnline(ctx, conn("bob", "b1", now), []im.ConversationID{g2}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if got := online(g1, now); !slices.Equal(got, []string{"bob/b1/phone", "carol/c1/phone", "carol/c2/phone"}) {
		t.Fatalf("online in %s = %v", g1, got)
	}
	// Past a connection's TTL (API Gateway closed it by then) it is not listed.
	if got := online(g1, now.Add(im.ConnectionTTL-30*time.Minute)); !slices.Equal(got, []string{"bob/b1/phone", "carol/c1/phone"}) {
		t.Fatalf("online in %s near c2's TTL = %v", g1, got)
	}
	// Removing a record removes its items, of every group it was indexed in.
	if err := st.RemoveConnection(ctx, "bob", "b1"); err != nil {
		t.Fatal(err)
	}
	if removed, err := st.RemoveStaleConnection(ctx, "carol", "c2", now.Add(-time.Minute)); !removed || err != nil {
		t.Fatalf("stale removal of c2: %v, %v", removed, err)
	}
	if got := online(g1, now); !slices.Equal(got, []string{"carol/c1/phone"}) {
		t.Fatalf("online in %s after bob's disconnect and c2's stale removal = %v", g1, got)
	}
	if got := online(g2, now); len(got) != 0 {
		t.Fatalf("online in %s after bob's disconnect = %v", g2, got)
	}
	// Carol's record of her other connection is untouched.
	if cs, err := st.Connections(ctx, "carol"); err != nil || len(cs) != 1 || cs[0].ID != "c1" {
		t.Fatalf("carol's connections = %+v, %v", cs, err)
	}
}
