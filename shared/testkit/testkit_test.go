package testkit

import (
	"net"
	"strconv"
	"testing"
)

// The addresses FreeAddr gives are free and, where the system's ephemeral
// range is known, below it: no outgoing connection or ":0" listener of
// another process can be handed them.
func TestFreeAddrIsFreeAndBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 50 {
		addr := FreeAddr(t)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s is not free: %v", addr, err)
		}
		ln.Close()
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if low > 0 && (port < minDrawnPort || port >= low) {
			t.Fatalf("%s is not in [%d, %d), below the ephemeral range", addr, minDrawnPort, low)
		}
	}
}
