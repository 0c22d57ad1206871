// The API reference: Swagger UI (swagger-ui-dist, served by the gateway) renders /api/v1/openapi.json into #reference.
// A file, not an inline script, so that the page's Content-Security-Policy forbids inline code.
/* global SwaggerUIBundle */
(function () {
  const mount = document.getElementById('reference');
  const loading = document.getElementById('reference-status');
  if (typeof SwaggerUIBundle !== 'function') {
    loading.textContent = 'The reference viewer did not load. The document itself is at /api/v1/openapi.json.';
    return;
  }
  window.ui = SwaggerUIBundle({
    url: mount.dataset.spec,
    domNode: mount,
    presets: [SwaggerUIBundle.presets.apis],
    layout: 'BaseLayout',
    // Every tag open, every operation listed (its details open on a click); an open operation is in the address
    // (#/tag/operationId), so it can be linked to.
    docExpansion: 'list',
    deepLinking: true,
    displayOperationId: true,
    defaultModelsExpandDepth: 1,
    defaultModelExpandDepth: 2,
    showExtensions: true,
    showCommonExtensions: true,
    filter: true,
    // No call to the public validator service (another origin; the CSP forbids it anyway).
    validatorUrl: null,
    // Calls made with "Try it out" carry the Authorize credentials, not the console's session cookie.
    withCredentials: false,
    requestInterceptor: (request) => {
      request.credentials = 'omit';
      return request;
    },
    onComplete: () => {
      loading.textContent = '';
      mount.setAttribute('aria-busy', 'false');
    },
  });
})();
