-- invocation_id_of and try_jsonb catch bad JSON in an exception block, i.e. a subtransaction, which a
-- parallel worker cannot start: PostgreSQL's rule is that such a function is PARALLEL UNSAFE. 0001
-- declared them PARALLEL SAFE, and a parallel plan of the turn listing failed ("cannot start
-- subtransactions during a parallel operation").
ALTER FUNCTION {schema}.invocation_id_of(TEXT) PARALLEL UNSAFE;
ALTER FUNCTION {schema}.try_jsonb(TEXT) PARALLEL UNSAFE;
