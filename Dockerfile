# One image for every process: the command picks the gateway or a service, e.g.
#   docker run IMAGE node dist/services/identity.js
# The build stage compiles every entry into dist/ (scripts/build.mjs, esbuild): no TypeScript at run time.

# --- manifests: only the package.json files, so the npm ci layer is cached until dependencies change.
FROM node:20-bookworm-slim AS manifests
WORKDIR /src
COPY . .
RUN find . -type f ! -name package.json -delete && find . -type d -empty -delete

# --- build: production dependencies; better-sqlite3 compiles when no prebuilt binary can be fetched.
FROM node:20-bookworm-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=manifests /src/ ./
COPY package-lock.json .npmrc ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY . .
RUN node scripts/build.mjs --force

# --- runtime: no compilers, non-root, read-only friendly (writes only to DATA_DIR and /tmp).
FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    SERVICE_HOST=0.0.0.0 \
    DATA_DIR=/app/.data
WORKDIR /app
COPY --from=build /app ./
# The image's `node` user (uid 1000) owns only the data directory.
RUN mkdir -p /app/.data && chown 1000:1000 /app/.data
USER 1000:1000
EXPOSE 8080 50051 50052 50053 50054 50055 50056 50057
CMD ["node", "--enable-source-maps", "dist/gateway.js"]
