package reconcile

import (
	"context"
	"fmt"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// Source is the server-side storage a reconciliation reads (the DynamoDB
// store satisfies it).
type Source interface {
	Head(ctx context.Context, u im.UserID) (int64, string, error)
	Page(ctx context.Context, u im.UserID, cursor int64, limit int, size func(im.Entry) int) (im.Page, error)
	Device(ctx context.Context, u im.UserID, d im.DeviceID) (im.DeviceCursor, error)
	Log(ctx context.Context, c im.ConversationID, after, upTo int64) ([]im.Message, error)
}

// ReadServer reads u's inbox, device d's ack cursor and, for every entry,
// the conversation log's message at its convSeq.
func ReadServer(ctx context.Context, src Source, u im.UserID, d im.DeviceID) (Server, error) {
	srv := Server{User: string(u), Acked: -1}
	head, epoch, err := src.Head(ctx, u)
	if err != nil {
		return srv, err
	}
	srv.Head, srv.Epoch = head, epoch
	for cursor := int64(0); cursor < head; {
		page, err := src.Page(ctx, u, cursor, 100, wire.EntrySize)
		if err != nil {
			return srv, err
		}
		for _, e := range page.Entries {
			srv.Entries = append(srv.Entries, Entry{Seq: e.Seq, MessageID: string(e.Message.ID),
				Conversation: string(e.Message.Conversation), ConvSeq: e.Message.ConvSeq, From: string(e.Message.From)})
		}
		if !page.More {
			break
		}
		cursor = page.Next
	}
	if d != "" {
		dev, err := src.Device(ctx, u, d)
		if err != nil {
			return srv, err
		}
		srv.Acked = dev.Acked
	}
	span := map[string][2]int64{}
	for _, e := range srv.Entries {
		s, ok := span[e.Conversation]
		if !ok {
			s = [2]int64{e.ConvSeq, e.ConvSeq}
		}
		span[e.Conversation] = [2]int64{min(s[0], e.ConvSeq), max(s[1], e.ConvSeq)}
	}
	logs := map[string]map[int64]string{}
	for conv, s := range span {
		msgs, err := src.Log(ctx, im.ConversationID(conv), s[0]-1, s[1])
		if err != nil {
			return srv, fmt.Errorf("conversation log %s: %w", conv, err)
		}
		logs[conv] = map[int64]string{}
		for _, m := range msgs {
			logs[conv][m.ConvSeq] = string(m.ID)
		}
	}
	for _, e := range srv.Entries {
		// A log entry past history retention is gone: only a different
		// message at that convSeq is a contradiction.
		if id, ok := logs[e.Conversation][e.ConvSeq]; ok && id != e.MessageID {
			srv.LogMismatches = append(srv.LogMismatches, e)
		}
	}
	return srv, nil
}
