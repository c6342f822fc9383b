package wire

import "github.com/signet-im/signet/shared/im"

// ActionRegister registers the calling device for wake-ups while it has no
// connection (issue 16): {"action":"register","platform":"apns","token":…},
// answered with a Registered frame. An empty token removes the device's
// registration.
const (
	ActionRegister = "register"
	TypeRegistered = "registered"
)

// MaxPushToken bounds a device token (APNs tokens are 64 hex digits, FCM
// registration tokens about 160 characters).
const MaxPushToken = 4096

// Register is the client frame of ActionRegister.
type Register struct {
	// Action is "register".
	Action string `json:"action"`
	Query
	// Platform is apns, apns_sandbox or fcm.
	Platform string `json:"platform"`
	// Token is the device's token on that platform ("" unregisters); a
	// frame without one is refused.
	Token *string `json:"token"`
}

// DecodeRegister validates a register frame.
func DecodeRegister(body string) (Register, error) {
	var f Register
	if err := decode(body, &f); err != nil {
		return Register{}, err
	}
	if err := f.Query.check(); err != nil {
		return Register{}, err
	}
	if !im.ValidPlatform(f.Platform) {
		return Register{Query: f.Query}, Problemf(CodeBadRequest, "platform must be apns, apns_sandbox or fcm")
	}
	if f.Token == nil {
		return Register{Query: f.Query}, Problemf(CodeBadRequest, "token is required (\"\" removes the registration)")
	}
	if len(*f.Token) > MaxPushToken {
		return Register{Query: f.Query}, Problemf(CodeBadRequest, "token is longer than %d characters", MaxPushToken)
	}
	for _, r := range *f.Token {
		if r <= ' ' || r > '~' {
			return Register{Query: f.Query}, Problemf(CodeBadRequest, "token must be printable ASCII without spaces")
		}
	}
	return f, nil
}

// Registered answers a register frame: the device now registered (or, with
// Registered false, no longer).
type Registered struct {
	// Type is "registered".
	Type string `json:"type"`
	// Ref echoes the request's ref.
	Ref        string `json:"ref,omitempty"`
	DeviceID   string `json:"deviceId"`
	Platform   string `json:"platform"`
	Registered bool   `json:"registered"`
}
