# kagent-fork: a multi-stage build; the runtime image holds only the installed wheel and runs as a
# non-root user. DATABASE_URL must point at kagent's PostgreSQL (the embedded demo database is for
# trying the service on a workstation, not for containers).

FROM python:3.11-slim AS build
WORKDIR /src
# Exactly the locked versions (requirements/serve.txt, every file's hash checked), the build backend among them.
COPY requirements/serve.txt ./requirements/serve.txt
RUN python -m pip install --no-cache-dir --require-hashes -r requirements/serve.txt
COPY pyproject.toml README.md openapi.yaml ./
COPY service ./service
COPY sql ./sql
RUN python -m pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /dist .

FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN useradd --create-home --uid 10001 kagent-fork
COPY requirements/serve.txt /tmp/serve.txt
RUN python -m pip install --no-cache-dir --require-hashes -r /tmp/serve.txt && rm /tmp/serve.txt
COPY --from=build /dist/*.whl /tmp/
RUN python -m pip install --no-cache-dir --no-deps /tmp/*.whl && rm /tmp/*.whl
USER 10001
EXPOSE 8083
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8083/readyz', timeout=4).status == 200 else 1)"
ENTRYPOINT ["kagent-fork"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8083", "--workers", "2"]
