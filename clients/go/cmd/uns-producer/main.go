// Command uns-producer sends one notification to a UNS server, reads it back
// and prints one JSON line:
//
//	{"notification_id": "...", "state": "NOTIFICATION_STATE_PENDING", "idempotent_replay": false}
//
// It is the reference Go producer: a plaintext gRPC connection, the API key as
// `authorization: Bearer <key>` metadata, and an idempotency key per logical
// notification, so that re-running it with the same --idempotency-key is safe.
// SendNotification is retried on UNAVAILABLE and DEADLINE_EXCEEDED, with that
// same key, and every call on RATE_LIMITED (RESOURCE_EXHAUSTED: the server shed
// it before acting) after the google.rpc.RetryInfo delay the server gave, within
// the same bounded number of attempts.
//
// With --wait-ack it sends with require_ack and then waits, over WatchEvents,
// for the notification's terminal ack event (ACKED, DISMISSED or TIMED_OUT),
// reconnecting and resuming after the last sequence it saw when the stream
// breaks. The line then has an "ack" field:
//
//	{..., "ack": {"kind": "EVENT_KIND_ACKED", "actor": "...", "sequence": 42}}
//
// --cursor-file keeps the resume position on disk, so a restarted producer
// (same --idempotency-key, or --notification-id) picks up where it stopped.
//
// With --batch N it sends N notifications in one BatchSendNotifications call
// (idempotency keys "<key>-0" .. "<key>-N-1"), reads nothing back and prints
// one JSON line per item, in order: the fields above plus "index", or
// "index" and "error": {"code", "reason", "message"} for a refused item.
//
// `uns-producer beat [--addr A] [--api-key K] HEARTBEAT_ID` sends nothing: it
// reports that the job a heartbeat watches ran (HeartbeatService.Beat), for
// cron, and prints one JSON line:
//
//	{"heartbeat_id": "...", "state": "HEARTBEAT_STATE_UP", "last_beat_time": "...", "deadline_time": "..."}
//
// Exit codes: 0 on success, 2 on a gRPC error (or, with --batch, when any item
// was refused) (code, reason and message on
// stderr) or a usage error, 3 when --wait-timeout passed before the terminal
// ack event (the line is printed without "ack"), 1 on anything else.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	unsv1 "github.com/uns-io/uns/clients/go/gen/uns/v1"
)

// sendAttempts bounds SendNotification attempts (the first one included).
const sendAttempts = 5

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
	waitAck          bool
	waitTimeout      time.Duration
	cursorFile       string
	notificationID   string
	batch            int
}

// result is the JSON line printed on success.
type result struct {
	NotificationID   string    `json:"notification_id"`
	State            string    `json:"state"`
	IdempotentReplay bool      `json:"idempotent_replay"`
	Ack              *ackEvent `json:"ack,omitempty"`
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
	fs.BoolVar(&o.waitAck, "wait-ack", false, "send with require_ack and wait for the terminal ack event (ACKED, DISMISSED, TIMED_OUT)")
	fs.DurationVar(&o.waitTimeout, "wait-timeout", 60*time.Second, "how long --wait-ack waits before giving up (exit 3)")
	fs.StringVar(&o.cursorFile, "cursor-file", "", "keep the WatchEvents resume position in this `file` and resume from it when it exists")
	fs.StringVar(&o.notificationID, "notification-id", "", "send nothing: wait for the terminal ack event of this notification `id` (implies --wait-ack)")
	fs.IntVar(&o.batch, "batch", 0, "send `N` notifications in one BatchSendNotifications call and print one line per item")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected arguments: %v", fs.Args())
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return o, err
	}
	if o.batch < 0 || (o.batch > 0 && (o.waitAck || o.notificationID != "")) {
		err := errors.New("--batch takes a positive N and does not combine with --wait-ack or --notification-id")
		fmt.Fprintln(stderr, err)
		return o, err
	}
	if o.idempotencyKey == "" {
		o.idempotencyKey = uuid.NewString()
	}
	if o.notificationID != "" {
		o.waitAck = true
	}
	return o, nil
}

// producer wraps the generated client with the per-call settings.
type producer struct {
	client  unsv1.NotificationServiceClient
	apiKey  string
	timeout time.Duration
	log     *log.Logger // progress on stderr
}

// withAuth attaches the credentials to every call made with ctx.
func (p *producer) withAuth(ctx context.Context) context.Context {
	if p.apiKey == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+p.apiKey)
}

// callContext bounds one unary RPC and attaches the credentials.
func (p *producer) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	return p.withAuth(ctx), cancel
}

func (o options) sendRequest() (*unsv1.SendNotificationRequest, error) {
	md, err := structpb.NewStruct(map[string]any{"lang": "go"})
	if err != nil {
		return nil, err
	}
	req := &unsv1.SendNotificationRequest{
		NotificationType: o.notificationType,
		Intent:           unsv1.NotificationIntent_NOTIFICATION_INTENT_INFORMATIONAL,
		Title:            o.title,
		Message:          o.message,
		Source:           o.source,
		IdempotencyKey:   o.idempotencyKey,
		Metadata:         md,
	}
	if o.waitAck {
		req.RequireAck = proto.Bool(true)
	}
	return req, nil
}

// send calls SendNotification, retrying UNAVAILABLE, DEADLINE_EXCEEDED and
// RATE_LIMITED only, with the same request, and so the same idempotency_key,
// every time: if an earlier attempt was committed after all, the server answers
// with the original notification and idempotent_replay=true instead of a
// duplicate.
func (p *producer) send(ctx context.Context, req *unsv1.SendNotificationRequest) (*unsv1.SendNotificationResponse, error) {
	for attempt := 1; ; attempt++ {
		callCtx, cancel := p.callContext(ctx)
		resp, err := p.client.SendNotification(callCtx, req)
		cancel()
		if err == nil || attempt == sendAttempts || !retryable(err) {
			return resp, err
		}
		delay := waitBefore(err, attempt)
		p.log.Printf("SendNotification: %s; retrying in %v with the same idempotency key", describe(err), delay.Round(time.Millisecond))
		if err := sleep(ctx, delay); err != nil {
			return nil, err
		}
	}
}

// retryable: the call may succeed if repeated. UNAVAILABLE covers the
// service's STORAGE_UNAVAILABLE and SHUTTING_DOWN; everything else (invalid
// input, conflicts, auth, NOT_FOUND) fails the same way every time.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	default:
		return rateLimited(err)
	}
}

// rateLimited: the server shed the call before acting on it (RESOURCE_EXHAUSTED
// with ErrorInfo reason RATE_LIMITED), so any call may be repeated after the
// delay its RetryInfo gives. RESOURCE_EXHAUSTED without it (e.g. a message over
// the size limit, TOO_MANY_STREAMS) is final.
func rateLimited(err error) bool {
	info := errorInfo(err)
	return status.Code(err) == codes.ResourceExhausted && info != nil && info.GetReason() == "RATE_LIMITED"
}

// serverDelay is the google.rpc.RetryInfo delay the error carries, if any.
func serverDelay(err error) (time.Duration, bool) {
	for _, detail := range status.Convert(err).Details() {
		if info, ok := detail.(*errdetails.RetryInfo); ok && info.GetRetryDelay() != nil {
			return info.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// waitBefore is the wait before the next attempt after `failures` consecutive
// failures, the last one err: the server's RetryInfo delay when it gave one
// (stretched by up to a fifth, never shortened, so clients shed together do
// not return together), else retryDelay's backoff.
func waitBefore(err error, failures int) time.Duration {
	if d, ok := serverDelay(err); ok {
		return d + rand.N(d/5+1)
	}
	return retryDelay(failures)
}

// errorInfo is the google.rpc.ErrorInfo the service attaches to every error
// it produces (domain "uns.v1"); switch on its Reason. It is nil for errors
// the transport made up (connection refused, deadline).
func errorInfo(err error) *errdetails.ErrorInfo {
	for _, detail := range status.Convert(err).Details() {
		if info, ok := detail.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// describe renders a gRPC error as "Code (REASON): message".
func describe(err error) string {
	st := status.Convert(err)
	if info := errorInfo(err); info != nil {
		return fmt.Sprintf("%s (%s): %s", st.Code(), info.GetReason(), st.Message())
	}
	return fmt.Sprintf("%s: %s", st.Code(), st.Message())
}

// retryDelay is the wait after `failures` consecutive failures (1 for the
// first): exponential from 100ms, capped at 5s, with jitter so that clients
// that failed together do not come back together.
func retryDelay(failures int) time.Duration {
	d := 100 * time.Millisecond << min(failures-1, 6)
	d = min(d, 5*time.Second)
	return d/2 + rand.N(d/2+1)
}

// sleep waits for d, or less if ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// get reads a notification back, retrying RATE_LIMITED only (a read that was
// shed), after the server's delay.
func (p *producer) get(ctx context.Context, id string) (*unsv1.Notification, error) {
	for attempt := 1; ; attempt++ {
		callCtx, cancel := p.callContext(ctx)
		resp, err := p.client.GetNotification(callCtx, &unsv1.GetNotificationRequest{NotificationId: id})
		cancel()
		if err == nil {
			return resp.GetNotification(), nil
		}
		if attempt == sendAttempts || !rateLimited(err) {
			return nil, err
		}
		delay := waitBefore(err, attempt)
		p.log.Printf("GetNotification: %s; retrying in %v", describe(err), delay.Round(time.Millisecond))
		if err := sleep(ctx, delay); err != nil {
			return nil, err
		}
	}
}

// dial opens a lazy client connection. Keepalive pings notice a dead
// connection under a quiet WatchEvents stream (the server allows one every
// 10s); the reconnect backoff is capped so a restarted server is found again
// within seconds.
func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                30 * time.Second,
			Timeout:             10 * time.Second,
			PermitWithoutStream: true,
		}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	)
}

// run performs send -> (wait for the ack) -> get and writes the result line.
func run(ctx context.Context, o options, stdout io.Writer, logger *log.Logger) error {
	conn, err := dial(o.addr)
	if err != nil {
		return fmt.Errorf("connect %s: %w", o.addr, err)
	}
	defer conn.Close()
	p := &producer{client: unsv1.NewNotificationServiceClient(conn), apiKey: o.apiKey, timeout: o.timeout, log: logger}

	if o.batch > 0 {
		return p.runBatch(ctx, o, stdout)
	}
	var out result
	var ack *unsv1.Event
	if o.waitAck {
		out, ack, err = p.sendAndWait(ctx, o)
	} else {
		out, err = p.sendOnly(ctx, o)
	}
	if err != nil && !errors.Is(err, errWaitTimeout) {
		return err
	}
	n, getErr := p.get(ctx, out.NotificationID)
	if getErr != nil {
		return getErr
	}
	out.State = n.GetState().String()
	if ack != nil {
		out.Ack = &ackEvent{
			Kind:     ack.GetKind().String(),
			Actor:    ack.GetPayload().GetFields()["actor"].GetStringValue(),
			Sequence: ack.GetSequence(),
		}
	}
	if encErr := json.NewEncoder(stdout).Encode(out); encErr != nil {
		return encErr
	}
	return err
}

func (p *producer) sendOnly(ctx context.Context, o options) (result, error) {
	req, err := o.sendRequest()
	if err != nil {
		return result{}, err
	}
	sent, err := p.send(ctx, req)
	if err != nil {
		return result{}, err
	}
	return result{NotificationID: sent.GetNotificationId(), IdempotentReplay: sent.GetIdempotentReplay()}, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "beat" {
		mainBeat(os.Args[2:])
		return
	}
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2)
	}
	logger := log.New(os.Stderr, "uns-producer: ", 0)
	err = run(context.Background(), o, os.Stdout, logger)
	switch {
	case err == nil:
	case errors.Is(err, errWaitTimeout):
		logger.Print(err)
		os.Exit(3)
	case errors.Is(err, errBatchItems):
		logger.Print(err)
		os.Exit(2)
	default:
		if _, ok := status.FromError(err); ok {
			logger.Print(describe(err))
			os.Exit(2)
		}
		logger.Print(err)
		os.Exit(1)
	}
}

// mainBeat is `uns-producer beat`: the same exit codes (2 for a gRPC error or
// a usage error, 1 for anything else).
func mainBeat(args []string) {
	o, err := parseBeatFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2)
	}
	logger := log.New(os.Stderr, "uns-producer: ", 0)
	if err := beat(context.Background(), o, os.Stdout, logger); err != nil {
		if _, ok := status.FromError(err); ok {
			logger.Print(describe(err))
			os.Exit(2)
		}
		logger.Print(err)
		os.Exit(1)
	}
}
