package bus

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/loom-ml/loom/libs/envelope"
)

// Spans follow OpenTelemetry's messaging semantic conventions: a producer
// span "publish <topic>" per record written, whose context replaces the
// record's traceparent, and a consumer span "process <topic>" per handler
// call, a child of the record's traceparent. So the trace of a request goes
// on through every record it causes: the outbox keeps the traceparent of the
// request that wrote an entry, and the relay's publish span is that
// request's child.
const (
	attrSystem       = attribute.Key("messaging.system")
	attrDestination  = attribute.Key("messaging.destination.name")
	attrOperation    = attribute.Key("messaging.operation.type")
	attrOperationNm  = attribute.Key("messaging.operation.name")
	attrKey          = attribute.Key("messaging.kafka.message.key")
	attrGroup        = attribute.Key("messaging.consumer.group.name")
	attrPartition    = attribute.Key("messaging.destination.partition.id")
	attrOffset       = attribute.Key("messaging.kafka.offset")
	attrMessageID    = attribute.Key("messaging.message.id")
	attrBatchCount   = attribute.Key("messaging.batch.message_count")
	tracerScope      = "github.com/loom-ml/loom/libs/bus"
	systemKafka      = "kafka"
	operationPublish = "publish"
	operationProcess = "process"
)

// tracerRef holds a tracer that may be set after construction.
type tracerRef struct{ p atomic.Pointer[trace.Tracer] }

func (r *tracerRef) set(tp trace.TracerProvider) {
	if tp == nil {
		r.p.Store(nil)
		return
	}
	t := tp.Tracer(tracerScope)
	r.p.Store(&t)
}

func (r *tracerRef) get() trace.Tracer {
	if t := r.p.Load(); t != nil {
		return *t
	}
	return nil
}

// SetTracerProvider makes the producer start a "publish <topic>" span for
// every record it writes (nil: none), a child of the record's traceparent (or
// of ctx's span when the record has none), and write the span's context as
// the record's traceparent.
func (p *Producer) SetTracerProvider(tp trace.TracerProvider) { p.tracer.set(tp) }

// headerCarrier reads and writes a record's traceparent header.
type headerCarrier struct{ m *kafka.Message }

func (h headerCarrier) Get(key string) string {
	for _, x := range h.m.Headers {
		if x.Key == key {
			return string(x.Value)
		}
	}
	return ""
}

func (h headerCarrier) Set(key, value string) {
	for i, x := range h.m.Headers {
		if x.Key == key {
			h.m.Headers[i].Value = []byte(value)
			return
		}
	}
	h.m.Headers = append(h.m.Headers, kafka.Header{Key: key, Value: []byte(value)})
}

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h.m.Headers))
	for _, x := range h.m.Headers {
		keys = append(keys, x.Key)
	}
	return keys
}

var _ propagation.TextMapCarrier = headerCarrier{}

// startPublish starts the publish spans of msgs (already cloned: their
// headers are changed) and returns the function that ends them with err.
func (p *Producer) startPublish(ctx context.Context, msgs []kafka.Message) func(error) {
	t := p.tracer.get()
	if t == nil {
		return func(error) {}
	}
	spans := make([]trace.Span, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		hc := headerCarrier{m: m}
		parent := ctx
		if hc.Get(envelope.HeaderTraceParent) != "" {
			parent = traceContext.Extract(context.Background(), hc)
		}
		attrs := []attribute.KeyValue{
			attrSystem.String(systemKafka), attrDestination.String(m.Topic),
			attrOperation.String(operationPublish), attrOperationNm.String(operationPublish),
			attrKey.String(string(m.Key)),
		}
		if id := hc.Get(envelope.HeaderID); id != "" {
			attrs = append(attrs, attrMessageID.String(id))
		}
		sctx, span := t.Start(parent, operationPublish+" "+m.Topic,
			trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
		traceContext.Inject(sctx, hc)
		spans[i] = span
	}
	return func(err error) {
		for _, s := range spans {
			if err != nil {
				s.RecordError(err)
				s.SetStatus(codes.Error, err.Error())
			}
			s.End()
		}
	}
}

// startProcess starts the "process <topic>" span of one handler call on ev,
// a child of ev's traceparent, and returns ctx carrying it (ctx with ev's
// trace context and no span of its own when the consumer has no tracer).
func (c *Consumer) startProcess(ctx context.Context, ev envelope.Event, batch int) (context.Context, func(error)) {
	ctx = WithTraceParent(ctx, ev.TraceParent)
	t := c.tracer.get()
	if t == nil {
		return ctx, func(error) {}
	}
	attrs := []attribute.KeyValue{
		attrSystem.String(systemKafka), attrDestination.String(ev.Topic),
		attrOperation.String(operationProcess), attrOperationNm.String(operationProcess),
		attrKey.String(ev.Key), attrGroup.String(c.cfg.GroupID),
		attrPartition.String(strconv.Itoa(ev.Partition)), attrOffset.Int64(ev.Offset),
		attrMessageID.String(ev.ID),
	}
	if batch > 1 {
		attrs = append(attrs, attrBatchCount.Int(batch))
	}
	ctx, span := t.Start(ctx, operationProcess+" "+ev.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
