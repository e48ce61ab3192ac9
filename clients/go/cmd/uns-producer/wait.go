package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	unsv1 "github.com/uns-io/uns/clients/go/gen/uns/v1"
)

// ackKinds are the terminal acknowledgement events: exactly one of them
// settles a notification that requires an acknowledgement.
var ackKinds = []unsv1.EventKind{
	unsv1.EventKind_EVENT_KIND_ACKED,
	unsv1.EventKind_EVENT_KIND_DISMISSED,
	unsv1.EventKind_EVENT_KIND_TIMED_OUT,
}

// ackEvent is the "ack" field of the result line.
type ackEvent struct {
	Kind     string `json:"kind"`
	Actor    string `json:"actor"`
	Sequence int64  `json:"sequence"`
}

// errWaitTimeout: --wait-timeout passed before the terminal ack event.
var errWaitTimeout = errors.New("wait timed out")

// errStreamEnded stands for a stream the server closed without an error:
// WatchEvents never ends by itself, so it is treated like UNAVAILABLE.
var errStreamEnded = status.Error(codes.Unavailable, "the server ended the stream")

// sendAndWait sends the notification with require_ack (or, with
// --notification-id, takes an existing one) and waits for its terminal ack
// event. On timeout it returns the result so far and errWaitTimeout.
func (p *producer) sendAndWait(ctx context.Context, o options) (result, *unsv1.Event, error) {
	cur, found, err := loadCursor(o.cursorFile)
	if err != nil {
		return result{}, nil, err
	}
	out := result{NotificationID: o.notificationID}
	if o.notificationID != "" {
		err = p.prepareExisting(ctx, o.notificationID, cur, found)
	} else {
		out, err = p.sendPositioned(ctx, o, cur, found)
	}
	if err != nil {
		return result{}, nil, err
	}

	p.log.Printf("waiting up to %v for the terminal ack event of %s", o.waitTimeout, out.NotificationID)
	waitCtx, cancel := context.WithTimeout(ctx, o.waitTimeout)
	defer cancel()
	ack, err := p.waitForAck(waitCtx, out.NotificationID, cur)
	// The stream's own deadline (DEADLINE_EXCEEDED) can fire a moment before the
	// context reports it: past the deadline, any failure is the wait timing out.
	deadline, _ := waitCtx.Deadline()
	if err != nil && (errors.Is(waitCtx.Err(), context.DeadlineExceeded) || !time.Now().Before(deadline)) {
		resume := "--notification-id " + out.NotificationID
		if o.cursorFile != "" {
			resume += " --cursor-file " + o.cursorFile
		}
		return out, nil, fmt.Errorf("%w: no terminal ack event for %s within %v (resume with %s)",
			errWaitTimeout, out.NotificationID, o.waitTimeout, resume)
	}
	return out, ack, err
}

// sendPositioned sends the notification. Without a stored cursor it first
// takes a position: every event of the new notification is committed after
// it, so none can slip by between SendNotification and WatchEvents.
func (p *producer) sendPositioned(ctx context.Context, o options, cur *cursor, found bool) (result, error) {
	if !found {
		pos, err := p.position(ctx)
		if err != nil {
			return result{}, err
		}
		if err := cur.advance(pos); err != nil {
			return result{}, err
		}
	}
	out, err := p.sendOnly(ctx, o)
	if err == nil {
		p.log.Printf("sent %s (idempotent_replay=%t)", out.NotificationID, out.IdempotentReplay)
	}
	return out, err
}

// prepareExisting checks that notification id awaits an acknowledgement and,
// without a stored cursor, positions cur: a notification still unsettled
// after a position has its ack event after it; for one settled already cur
// stays 0, so the watch reads its history.
func (p *producer) prepareExisting(ctx context.Context, id string, cur *cursor, found bool) (err error) {
	var pos int64
	if !found {
		if pos, err = p.position(ctx); err != nil {
			return err
		}
	}
	n, err := p.get(ctx, id)
	if err != nil {
		return err
	}
	if !n.GetEffectivePolicy().GetRequireAck() {
		return fmt.Errorf("notification %s does not require an acknowledgement", id)
	}
	if found || ackSettled(n.GetAckState()) {
		return nil
	}
	return cur.advance(pos)
}

// position returns the sequence every event committed from now on will
// exceed: the first message of a fresh stream, which always comes at once
// (a heartbeat with the stream's position, or an event after it).
func (p *producer) position(ctx context.Context) (int64, error) {
	for attempt := 1; ; attempt++ {
		pos, err := p.positionOnce(ctx)
		if err == nil || attempt == sendAttempts || !retryableWatch(err) {
			return pos, err
		}
		if err := sleep(ctx, waitBefore(err, attempt)); err != nil {
			return 0, err
		}
	}
}

func (p *producer) positionOnce(ctx context.Context) (int64, error) {
	ctx, cancel := p.callContext(ctx)
	defer cancel() // ends the stream
	stream, err := p.client.WatchEvents(ctx, &unsv1.WatchEventsRequest{Kinds: ackKinds})
	if err != nil {
		return 0, err
	}
	msg, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return 0, errStreamEnded
	}
	if err != nil {
		return 0, err
	}
	if ev := msg.GetEvent(); ev != nil {
		return ev.GetSequence(), nil
	}
	return msg.GetHeartbeat().GetHighWaterSequence(), nil
}

// waitForAck follows WatchEvents for the notification's ack events, after
// cur, until the terminal one arrives or ctx ends. When a stream breaks it
// waits (backoff) and opens a new one after cur, the last sequence seen:
// the server sends every matching event committed after it, so nothing is
// missed or repeated.
func (p *producer) waitForAck(ctx context.Context, id string, cur *cursor) (*unsv1.Event, error) {
	failures := 0
	for {
		ack, progressed, err := p.watchOnce(ctx, id, cur)
		if err == nil {
			return ack, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !retryableWatch(err) {
			return nil, err
		}
		if progressed {
			failures = 0
		}
		failures++
		delay := waitBefore(err, failures)
		p.log.Printf("watch interrupted (%s); reconnecting in %v after sequence %d",
			describe(err), delay.Round(time.Millisecond), cur.sequence)
		if err := sleep(ctx, delay); err != nil {
			return nil, err
		}
	}
}

// watchOnce runs one WatchEvents call. progressed reports whether it received
// anything (the backoff starts over then).
func (p *producer) watchOnce(ctx context.Context, id string, cur *cursor) (ack *unsv1.Event, progressed bool, err error) {
	ctx, cancel := context.WithCancel(p.withAuth(ctx))
	defer cancel() // ends the stream
	after := cur.sequence
	stream, err := p.client.WatchEvents(ctx, &unsv1.WatchEventsRequest{
		NotificationIds: []string{id},
		Kinds:           ackKinds,
		AfterSequence:   after,
		// after_sequence 0 alone means "from now"; a cursor of 0 (no position
		// yet, or one taken on an empty timeline) means "everything".
		ReplayHistory: after == 0,
	})
	if err != nil {
		return nil, false, err
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, progressed, errStreamEnded
			}
			// On shutdown the server says how far this stream got.
			if seq, ok := resumeAfter(err); ok {
				if err := cur.advance(seq); err != nil {
					return nil, progressed, err
				}
			}
			return nil, progressed, err
		}
		if !progressed {
			progressed = true
			p.log.Printf("watching %s after sequence %d", id, after)
		}
		switch r := msg.GetResponse().(type) {
		case *unsv1.WatchEventsResponse_Heartbeat:
			if err := cur.advance(r.Heartbeat.GetHighWaterSequence()); err != nil {
				return nil, progressed, err
			}
		case *unsv1.WatchEventsResponse_Event:
			ev := r.Event
			if ev.GetSequence() <= cur.sequence {
				continue // seen before a reconnect
			}
			if ev.GetNotificationId() == id && slices.Contains(ackKinds, ev.GetKind()) {
				// Not persisted: a re-run with the same cursor file reports
				// this event again instead of waiting for one that came.
				return ev, progressed, nil
			}
			if err := cur.advance(ev.GetSequence()); err != nil {
				return nil, progressed, err
			}
		}
	}
}

// ackSettled: the ack lifecycle is over (its terminal event was committed).
func ackSettled(state unsv1.AckState) bool {
	switch state {
	case unsv1.AckState_ACK_STATE_ACKED, unsv1.AckState_ACK_STATE_DISMISSED, unsv1.AckState_ACK_STATE_TIMED_OUT:
		return true
	default:
		return false
	}
}

// retryableWatch: opening the stream again may help. That is UNAVAILABLE
// (server shutting down, database outage, connection refused or lost) and a
// stream broken by the transport, without a status from the service
// (INTERNAL or UNKNOWN with no ErrorInfo, e.g. a reset connection). The
// service's own refusals (UNAUTHENTICATED, PERMISSION_DENIED,
// HISTORY_COMPACTED, INVALID_REQUEST, ...) are final, except RATE_LIMITED:
// the stream's start was shed, so it is opened again after the server's delay.
func retryableWatch(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable:
		return true
	case codes.Internal, codes.Unknown:
		return errorInfo(err) == nil
	default:
		return rateLimited(err)
	}
}

// resumeAfter reads the resume_after_sequence a SHUTTING_DOWN error carries.
func resumeAfter(err error) (int64, bool) {
	info := errorInfo(err)
	if info == nil || info.GetReason() != "SHUTTING_DOWN" {
		return 0, false
	}
	seq, perr := strconv.ParseInt(info.GetMetadata()["resume_after_sequence"], 10, 64)
	return seq, perr == nil
}

// cursor is the WatchEvents resume position: every matching event with a
// greater sequence is still to come. With a path it is kept in that file.
type cursor struct {
	sequence int64
	path     string
	saved    bool // the file holds sequence
}

// loadCursor reads the cursor file; found is false when there is none.
func loadCursor(path string) (c *cursor, found bool, err error) {
	c = &cursor{path: path}
	if path == "" {
		return c, false, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	seq, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || seq < 0 {
		return nil, false, fmt.Errorf("cursor file %s does not hold a sequence number: %q", path, data)
	}
	c.sequence, c.saved = seq, true
	return c, true, nil
}

// advance moves the cursor forward to seq and persists it: a temporary file
// is written, synced and renamed over the old one, so a crash leaves either
// the old or the new position, never a torn file.
func (c *cursor) advance(seq int64) error {
	if seq < c.sequence || (seq == c.sequence && (c.saved || c.path == "")) {
		return nil
	}
	c.sequence = seq
	if c.path == "" {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.path), filepath.Base(c.path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	_, err = fmt.Fprintf(tmp, "%d\n", seq)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), c.path)
	}
	if err != nil {
		return fmt.Errorf("cursor file: %w", err)
	}
	c.saved = true
	return nil
}
