-- tollgate-store schema 4, PostgreSQL flavour (documented in src/outbox.rs): the webhook outbox.
-- (Number 0004: 0003 is the audit trail's; the migrator applies whichever it lacks, in order.)
-- `webhook_subscriptions` says which webhook wants which event kind; the process that delivers
-- writes it. The trigger turns every event of a subscribed kind into one `webhook_deliveries` row
-- per subscribed webhook, inside the transaction that appends the event: an event and its
-- deliveries commit together or not at all, whoever writes the event (API or any Worker).
-- A delivery is `pending` (claimable once `due_at` passed; a claim leases it by moving `due_at`
-- and counts the attempt, the claim's fence), then `delivered` or `failed` (final).

CREATE TABLE webhook_subscriptions (
    kind    text NOT NULL,
    webhook text NOT NULL,
    PRIMARY KEY (kind, webhook)
);

CREATE TABLE webhook_deliveries (
    delivery_id bigserial PRIMARY KEY,
    row_version bigint  NOT NULL,
    webhook     text    NOT NULL,
    session_id  text    NOT NULL,
    seq         bigint  NOT NULL,
    kind        text    NOT NULL,
    payload     text    NOT NULL,
    event_at    bigint  NOT NULL,
    state       text    NOT NULL,
    attempts    bigint  NOT NULL DEFAULT 0,
    due_at      bigint  NOT NULL,
    lease_owner text,
    last_error  text,
    created_at  bigint  NOT NULL,
    updated_at  bigint  NOT NULL,
    finished_at bigint,
    UNIQUE (webhook, session_id, seq)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (due_at) WHERE state = 'pending';

CREATE FUNCTION events_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (row_version, webhook, session_id, seq, kind, payload, event_at,
        state, attempts, due_at, created_at, updated_at)
    SELECT 1, s.webhook, NEW.session_id, NEW.seq, NEW.kind, NEW.payload, NEW.created_at,
        'pending', 0, NEW.created_at, NEW.created_at, NEW.created_at
    FROM webhook_subscriptions s WHERE s.kind = NEW.kind;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_webhook_outbox AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION events_webhook_outbox();
