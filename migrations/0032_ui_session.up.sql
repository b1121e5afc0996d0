-- The UI's sign-in sessions (docs/operations.md, "Sign-in"), shared by
-- every API process so that a browser may reach any of them. key is the
-- SHA-256 of the random ID in the browser's cookie: the cookie itself is
-- never stored. refresh_token is the provider's and renews the session:
-- grant this table to the service's role alone.
CREATE TABLE ui_session (
	key           text PRIMARY KEY,
	public_id     text NOT NULL,
	subject       text NOT NULL,
	name          text NOT NULL,
	roles         text[] NOT NULL,
	csrf          text NOT NULL,
	refresh_token text NOT NULL,
	id_token      text NOT NULL,
	created_at    timestamptz NOT NULL,
	check_at      timestamptz NOT NULL,
	expires_at    timestamptz
);

-- The sweep of sessions past their age.
CREATE INDEX ui_session_created ON ui_session (created_at);

-- The key signing the sign-in cookies, made by the first process that
-- needs it and read by the others.
CREATE TABLE ui_session_key (
	id  integer PRIMARY KEY CHECK (id = 1),
	key bytea NOT NULL
);
