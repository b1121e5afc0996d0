-- Every read of a review's raw content (docs/api.md, "Content access";
-- docs/operations.md, "Sign-in"): who read it (the provider's subject or
-- a static token's name, and a display name), when, with which role and
-- through which credential (a static token's name, a JWT's jti, or the
-- UI session's public ID, never a secret), for which request. A row is
-- written before the content is sent; rows are only ever inserted.
CREATE TABLE content_access (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	review_id    text NOT NULL,
	at           timestamptz NOT NULL,
	subject      text NOT NULL,
	display_name text NOT NULL,
	actor        text NOT NULL,
	role         text NOT NULL,
	via          text NOT NULL CHECK (via IN ('token', 'jwt', 'session')),
	credential   text NOT NULL,
	request_id   text NOT NULL,
	outcome      text NOT NULL CHECK (outcome IN ('served', 'purged'))
);

-- An auditor's view of one review, and the export of a time range.
CREATE INDEX content_access_review ON content_access (review_id, at, id);
CREATE INDEX content_access_at ON content_access (at, id);

-- Append-only: an access once recorded is never changed.
CREATE FUNCTION content_access_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'content_access rows are never updated';
END $$;
CREATE TRIGGER content_access_immutable BEFORE UPDATE ON content_access
	FOR EACH ROW EXECUTE FUNCTION content_access_immutable();
