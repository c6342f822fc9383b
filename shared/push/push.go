// Package push posts frames to WebSocket connections through API Gateway's
// @connections management API (the SDK's apigatewaymanagementapi client).
package push

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"

	"github.com/signet-im/signet/shared/im"
)

// Gateway pushes to connections of one WebSocket API stage.
type Gateway struct {
	client *apigatewaymanagementapi.Client
}

// New returns a pusher over a management API client whose base endpoint is
// the stage's https://{api}.execute-api.{region}.amazonaws.com/{stage}.
func New(client *apigatewaymanagementapi.Client) *Gateway { return &Gateway{client: client} }

// Push posts data to the connection. A connection that no longer exists
// yields an error wrapping im.ErrGone (HTTP 410).
func (g *Gateway) Push(ctx context.Context, id im.ConnectionID, data []byte) error {
	_, err := g.client.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{
		ConnectionId: aws.String(string(id)),
		Data:         data,
	})
	if _, ok := errors.AsType[*types.GoneException](err); ok {
		return fmt.Errorf("push to %s: %w", id, im.ErrGone)
	}
	if err != nil {
		return fmt.Errorf("push to %s: %w", id, err)
	}
	return nil
}

// Disconnect closes the connection (DeleteConnection). One already gone
// (410) is not an error.
func (g *Gateway) Disconnect(ctx context.Context, id im.ConnectionID) error {
	_, err := g.client.DeleteConnection(ctx, &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(string(id))})
	if _, ok := errors.AsType[*types.GoneException](err); ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("disconnect %s: %w", id, err)
	}
	return nil
}
