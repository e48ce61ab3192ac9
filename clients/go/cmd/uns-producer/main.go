// Command uns-producer sends one notification to a UNS server, reads it back
// and prints one JSON line:
//
//	{"notification_id": "...", "state": "NOTIFICATION_STATE_PENDING", "idempotent_replay": false}
//
// It is the reference Go producer: a plaintext gRPC connection, the API key as
// `authorization: Bearer <key>` metadata, and an idempotency key per logical
// notification, so that re-running it with the same --idempotency-key is safe.
//
// Exit codes: 0 on success, 2 on a gRPC error (code and message on stderr) or
// a usage error, 1 on anything else.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	unsv1 "github.com/uns-io/uns/clients/go/gen/uns/v1"
)

// options are the command-line flags.
type options struct {
	addr             string
	apiKey           string
	notificationType string
	source           string
	idempotencyKey   string
	title            string
	message          string
	timeout          time.Duration
}

// result is the JSON line printed on success.
type result struct {
	NotificationID   string `json:"notification_id"`
	State            string `json:"state"`
	IdempotentReplay bool   `json:"idempotent_replay"`
}

// parseFlags reports its errors (and the usage) on stderr itself.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("uns-producer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:50051", "UNS server address (host:port, plaintext)")
	fs.StringVar(&o.apiKey, "api-key", "", "API `key`, sent as \"authorization: Bearer <key>\" metadata")
	fs.StringVar(&o.notificationType, "type", "demo.alert", "notification type")
	fs.StringVar(&o.source, "source", "go-producer", "producing component")
	fs.StringVar(&o.idempotencyKey, "idempotency-key", "", "idempotency key (default: a random UUID)")
	fs.StringVar(&o.title, "title", "UNS demo alert", "notification title")
	fs.StringVar(&o.message, "message", "Sent by the Go uns-producer.", "notification body")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "deadline for each RPC")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected arguments: %v", fs.Args())
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return o, err
	}
	if o.idempotencyKey == "" {
		o.idempotencyKey = uuid.NewString()
	}
	return o, nil
}

// producer wraps the generated client with the per-call settings.
type producer struct {
	client  unsv1.NotificationServiceClient
	apiKey  string
	timeout time.Duration
}

// callContext bounds one RPC and attaches the credentials.
func (p *producer) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	if p.apiKey != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+p.apiKey)
	}
	return ctx, cancel
}

func (p *producer) send(ctx context.Context, o options) (*unsv1.SendNotificationResponse, error) {
	md, err := structpb.NewStruct(map[string]any{"lang": "go"})
	if err != nil {
		return nil, err
	}
	ctx, cancel := p.callContext(ctx)
	defer cancel()
	return p.client.SendNotification(ctx, &unsv1.SendNotificationRequest{
		NotificationType: o.notificationType,
		Intent:           unsv1.NotificationIntent_NOTIFICATION_INTENT_INFORMATIONAL,
		Title:            o.title,
		Message:          o.message,
		Source:           o.source,
		IdempotencyKey:   o.idempotencyKey,
		Metadata:         md,
	})
}

func (p *producer) get(ctx context.Context, id string) (*unsv1.Notification, error) {
	ctx, cancel := p.callContext(ctx)
	defer cancel()
	resp, err := p.client.GetNotification(ctx, &unsv1.GetNotificationRequest{NotificationId: id})
	if err != nil {
		return nil, err
	}
	return resp.GetNotification(), nil
}

// run performs send -> get and writes the result line. A later --wait-ack
// mode slots in between get and the output (WatchEvents on the id).
func run(ctx context.Context, o options, stdout io.Writer) error {
	conn, err := grpc.NewClient(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect %s: %w", o.addr, err)
	}
	defer conn.Close()
	p := &producer{client: unsv1.NewNotificationServiceClient(conn), apiKey: o.apiKey, timeout: o.timeout}

	sent, err := p.send(ctx, o)
	if err != nil {
		return err
	}
	n, err := p.get(ctx, sent.GetNotificationId())
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(result{
		NotificationID:   sent.GetNotificationId(),
		State:            n.GetState().String(),
		IdempotentReplay: sent.GetIdempotentReplay(),
	})
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2)
	}
	if err := run(context.Background(), o, os.Stdout); err != nil {
		if st, ok := status.FromError(err); ok {
			fmt.Fprintf(os.Stderr, "uns-producer: %s: %s\n", st.Code(), st.Message())
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "uns-producer:", err)
		os.Exit(1)
	}
}
