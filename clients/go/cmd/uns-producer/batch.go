package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/status"

	unsv1 "github.com/uns-io/uns/clients/go/gen/uns/v1"
)

// errBatchItems: the batch was answered, but some of its items were refused
// (each one's line says why).
var errBatchItems = errors.New("some items of the batch were refused")

// batchLine is the JSON line printed for each item of --batch N.
type batchLine struct {
	Index            int         `json:"index"`
	NotificationID   string      `json:"notification_id,omitempty"`
	State            string      `json:"state,omitempty"`
	IdempotentReplay bool        `json:"idempotent_replay"`
	DedupOwnerID     string      `json:"dedup_owner_id,omitempty"`
	Error            *batchError `json:"error,omitempty"`
}

type batchError struct {
	Code    string `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// batchRequest is --batch N: N copies of the notification, the i-th with the
// idempotency key "<key>-<i>" and the title "<title> #<i>", so re-running with
// the same --idempotency-key replays every item.
func (o options) batchRequest() (*unsv1.BatchSendNotificationsRequest, error) {
	batch := &unsv1.BatchSendNotificationsRequest{}
	for i := range o.batch {
		req, err := o.sendRequest()
		if err != nil {
			return nil, err
		}
		req.IdempotencyKey = fmt.Sprintf("%s-%d", o.idempotencyKey, i)
		req.Title = fmt.Sprintf("%s #%d", o.title, i)
		batch.Requests = append(batch.Requests, req)
	}
	return batch, nil
}

// sendBatch calls BatchSendNotifications, retried exactly like send: every
// item carries its idempotency key, so a repeated batch replays.
func (p *producer) sendBatch(ctx context.Context, req *unsv1.BatchSendNotificationsRequest) (*unsv1.BatchSendNotificationsResponse, error) {
	for attempt := 1; ; attempt++ {
		callCtx, cancel := p.callContext(ctx)
		resp, err := p.client.BatchSendNotifications(callCtx, req)
		cancel()
		if err == nil || attempt == sendAttempts || !retryable(err) {
			return resp, err
		}
		delay := waitBefore(err, attempt)
		p.log.Printf("BatchSendNotifications: %s; retrying in %v with the same idempotency keys", describe(err), delay.Round(time.Millisecond))
		if err := sleep(ctx, delay); err != nil {
			return nil, err
		}
	}
}

// runBatch sends --batch N notifications in one call and prints one line per
// item, in order; a refused item's line carries its code, reason and message.
func (p *producer) runBatch(ctx context.Context, o options, stdout io.Writer) error {
	req, err := o.batchRequest()
	if err != nil {
		return err
	}
	resp, err := p.sendBatch(ctx, req)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	refused := false
	for i, item := range resp.GetResults() {
		line := batchLine{Index: i}
		if sent := item.GetResponse(); sent != nil {
			line.NotificationID = sent.GetNotificationId()
			line.State = sent.GetState().String()
			line.IdempotentReplay = sent.GetIdempotentReplay()
			line.DedupOwnerID = sent.GetDedupOwnerId()
		} else {
			refused = true
			err := status.FromProto(item.GetError()).Err()
			reason := ""
			if info := errorInfo(err); info != nil {
				reason = info.GetReason()
			}
			line.Error = &batchError{Code: status.Code(err).String(), Reason: reason, Message: status.Convert(err).Message()}
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
	}
	if refused {
		return errBatchItems
	}
	return nil
}
