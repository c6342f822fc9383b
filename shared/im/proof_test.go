package im

import "testing"

func TestGroupProofNamesItsGroupAndConvSeqUnderItsKey(t *testing.T) {
	t.Parallel()
	key, other := make([]byte, GroupProofKeySize), make([]byte, GroupProofKeySize)
	other[0] = 1
	p := GroupProof(key, "g:ops", 12)
	if len(p) != 22 || !ValidGroupProof(key, "g:ops", 12, p) {
		t.Fatalf("proof %q does not verify", p)
	}
	for _, bad := range []struct {
		key   []byte
		c     ConversationID
		n     int64
		proof string
	}{
		{key, "g:ops", 13, p},     // another convSeq
		{key, "g:ops1", 2, p},     // "g:ops" 12 is not "g:ops1" 2
		{key, "g:dev", 12, p},     // another group
		{other, "g:ops", 12, p},   // another key
		{nil, "g:ops", 12, p},     // no key
		{key, "g:ops", 12, ""},    // no proof
		{key, "g:ops", 12, p[1:]}, // cut
	} {
		if ValidGroupProof(bad.key, bad.c, bad.n, bad.proof) {
			t.Errorf("%+v verified", bad)
		}
	}
}
