import { identityV1 } from '@svc/proto';
import { createClient, jwksFrom, JwtVerifier } from '@svc/kit';

/**
 * The token verifier of every service other than identity: public keys come from identity's GetJwks over gRPC.
 * Returns the identity client too, for services that call identity on a caller's behalf.
 */
export function identityVerifier(config: { identityAddr: string; grpcDeadlineMs: number; jwtIssuer: string; jwtAudience: string }) {
  const identity = createClient(identityV1.IdentityServiceService, config.identityAddr, { deadlineMs: config.grpcDeadlineMs });
  const verifier = new JwtVerifier({
    issuer: config.jwtIssuer,
    audience: config.jwtAudience,
    fetchJwks: jwksFrom(async () => (await identity.getJwks({})).jwksJson),
  });
  return { verifier, identity };
}
