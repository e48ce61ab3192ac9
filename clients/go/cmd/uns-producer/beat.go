package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"time"

	unsv1 "github.com/uns-io/uns/clients/go/gen/uns/v1"
)

// beatOptions are the flags of `uns-producer beat [flags] HEARTBEAT_ID`.
type beatOptions struct {
	addr        string
	apiKey      string
	timeout     time.Duration
	heartbeatID string
}

// beatLine is the JSON line printed after a beat.
type beatLine struct {
	HeartbeatID    string `json:"heartbeat_id"`
	State          string `json:"state"`
	LastBeatTime   string `json:"last_beat_time"`
	DeadlineTime   string `json:"deadline_time"`
	NotificationID string `json:"notification_id,omitempty"`
}

// parseBeatFlags reads `beat`'s flags and its one argument, the heartbeat id.
func parseBeatFlags(args []string, stderr io.Writer) (beatOptions, error) {
	var o beatOptions
	fs := flag.NewFlagSet("uns-producer beat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: uns-producer beat [flags] HEARTBEAT_ID")
		fmt.Fprintln(stderr, "Reports that the job HEARTBEAT_ID watches ran (HeartbeatService.Beat), e.g. from cron:")
		fmt.Fprintln(stderr, "  0 3 * * * backup.sh && uns-producer beat --addr uns:50051 --api-key \"$KEY\" nightly-backup")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.addr, "addr", "127.0.0.1:50051", "UNS server address (host:port, plaintext)")
	fs.StringVar(&o.apiKey, "api-key", "", "API `key` (a producer's), sent as \"authorization: Bearer <key>\" metadata")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "deadline for each RPC")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 1 {
		err := errors.New("beat takes one HEARTBEAT_ID")
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return o, err
	}
	o.heartbeatID = fs.Arg(0)
	return o, nil
}

// beat calls HeartbeatService.Beat, retried like send (UNAVAILABLE,
// DEADLINE_EXCEEDED, RATE_LIMITED): a repeated beat only moves the last beat
// again, so repeating one whose answer was lost is harmless.
func beat(ctx context.Context, o beatOptions, stdout io.Writer, logger *log.Logger) error {
	conn, err := dial(o.addr)
	if err != nil {
		return fmt.Errorf("connect %s: %w", o.addr, err)
	}
	defer conn.Close()
	p := &producer{apiKey: o.apiKey, timeout: o.timeout, log: logger}
	client := unsv1.NewHeartbeatServiceClient(conn)
	req := &unsv1.BeatRequest{HeartbeatId: o.heartbeatID}
	for attempt := 1; ; attempt++ {
		callCtx, cancel := p.callContext(ctx)
		resp, err := client.Beat(callCtx, req)
		cancel()
		if err == nil {
			h := resp.GetHeartbeat()
			line := beatLine{
				HeartbeatID:    h.GetHeartbeatId(),
				State:          h.GetState().String(),
				LastBeatTime:   h.GetLastBeatTime().AsTime().Format(time.RFC3339Nano),
				DeadlineTime:   h.GetDeadlineTime().AsTime().Format(time.RFC3339Nano),
				NotificationID: h.GetNotificationId(),
			}
			return json.NewEncoder(stdout).Encode(line)
		}
		if attempt == sendAttempts || !retryable(err) {
			return err
		}
		delay := waitBefore(err, attempt)
		logger.Printf("Beat: %s; retrying in %v", describe(err), delay.Round(time.Millisecond))
		if err := sleep(ctx, delay); err != nil {
			return err
		}
	}
}
