package dynamo

// SetAckPage makes the first page of ack range items a trace reads n
// items instead of ackPage, so that a test reaches past it with a few
// dozen acks instead of hundreds.
func SetAckPage(st *Store, n int32) { st.ackPage = n }

// SetReadCover makes a read of alerts by convSeq alone look through the
// newest n convSeqs up to its upTo instead of maxReadCover.
func SetReadCover(st *Store, n int64) { st.readCover = n }
