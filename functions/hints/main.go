// Command hints is the HintsFunction Lambda: the presence queue's consumer
// — debounced presence pushes to peers and SNS wake-ups of offline devices
// (issue 16), the best-effort hints of the system.
package main

import (
	"os"

	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/app/wakeapp"
)

func main() {
	app.Start("HintsFunction", app.Hints, wakeapp.Configure(os.Getenv))
}
