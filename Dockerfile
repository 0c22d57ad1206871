# One image for every process: the command picks the gateway or a service, e.g.
#   docker run IMAGE node dist/services/identity.js
# or all of them on one machine (what `npm start` runs once dist/ is built): docker run IMAGE node dist/start.js
# The build stage compiles every entry into dist/ (scripts/build.mjs, esbuild): no TypeScript at run time. The
# runtime stage holds only what the processes read: dist/, the production dependencies, package.json, the launcher's
# list of services and the health-check script. test/ (and docs/, bench/) never reach it.

# Node 24, the active LTS (supported to April 2028). The code also runs on Node >= 20.19 (package.json engines).
ARG NODE_IMAGE=node:24-bookworm-slim

# --- manifests: only the package.json files, so the npm ci layer is cached until dependencies change.
FROM ${NODE_IMAGE} AS manifests
WORKDIR /src
COPY . .
RUN find . -type f ! -name package.json -delete && find . -type d -empty -delete

# --- build: production dependencies; better-sqlite3 compiles when no prebuilt binary can be fetched.
FROM ${NODE_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=manifests /src/ ./
COPY package-lock.json .npmrc ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY . .
RUN node scripts/build.mjs --force
# What the runtime needs besides dist/ and the root node_modules: a workspace's own node_modules (a dependency in
# another version than the root's, required by the bundles by relative path) and each service's main.ts (the
# launcher, dist/start.js, lists the services by them).
RUN mkdir -p /runtime \
 && for d in packages/*/node_modules services/*/node_modules gateway/node_modules services/*/src/main.ts; do \
      if [ -e "$d" ]; then mkdir -p "/runtime/$(dirname "$d")" && cp -a "$d" "/runtime/$d"; fi; \
    done

# --- runtime: no compilers, no sources, non-root, read-only friendly (writes only to DATA_DIR and /tmp).
FROM ${NODE_IMAGE} AS runtime
ARG NODE_IMAGE
# Set by the release build: docker build --build-arg VERSION=... --build-arg REVISION=$(git rev-parse HEAD) ...
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=""
ARG CREATED=""
LABEL org.opencontainers.image.title="svc-platform" \
      org.opencontainers.image.description="Multi-tenant API for AI applications: a Fastify gateway and seven gRPC services (one image, the command picks the process)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="${NODE_IMAGE}"
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    SERVICE_HOST=0.0.0.0 \
    DATA_DIR=/app/.data
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/deploy/grpc-health.mjs ./deploy/grpc-health.mjs
COPY --from=build /runtime/ ./
# The image's `node` user (uid 1000) owns only the data directory.
RUN mkdir -p /app/.data && chown 1000:1000 /app/.data
USER 1000:1000
EXPOSE 8080 50051 50052 50053 50054 50055 50056 50057
CMD ["node", "--enable-source-maps", "dist/gateway.js"]
