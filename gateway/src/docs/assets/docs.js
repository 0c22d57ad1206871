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
    plugins: [accessible],
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
  mendRenderedMarkup(mount);

  /**
   * Swagger UI's own markup, mended through its plugin system (axe-core's serious and critical findings; the colours
   * are in docs.css). Each change keeps what the viewer shows and does.
   */
  function accessible(system) {
    const h = system.React.createElement;
    const Fragment = system.React.Fragment;
    return {
      components: {
        // The operation's path, without the deep link Swagger UI puts inside the summary's toggle button (a link
        // inside a button: neither works well with a keyboard or a screen reader). Opening the operation still
        // puts #/tag/operationId in the address (deepLinking), so it can be linked to.
        OperationSummaryPath: function OperationSummaryPath(props) {
          const op = props.operationProps.toObject();
          const parts = [];
          op.path.split(/(?=\/)/g).forEach((part, i) => {
            if (i > 0) parts.push(h('wbr', { key: `w${i}` }));
            parts.push(part);
          });
          return h(
            'span',
            { className: op.deprecated ? 'opblock-summary-path__deprecated' : 'opblock-summary-path', 'data-path': op.path },
            h('span', null, parts),
          );
        },
      },
      wrapComponents: {
        // The dialog's close button holds only an icon: give it words.
        CloseIcon: (Original) =>
          function CloseIcon(props) {
            return h(Fragment, null, h(Original, props), h('span', { className: 'docs-visually-hidden' }, 'Close'));
          },
        // A button whose aria-label leaves out its visible text ("Authorize" named "Apply credentials") is named
        // by both, visible text first, so that speech input ("click Authorize") finds it (WCAG 2.5.3).
        Button: (Original) =>
          function Button(props) {
            const label = props['aria-label'];
            const text = typeof props.children === 'string' ? props.children : null;
            if (!label || !text || label.toLowerCase().includes(text.toLowerCase())) return h(Original, props);
            return h(Original, Object.assign({}, props, { 'aria-label': `${text} (${label.toLowerCase()})` }));
          },
      },
    };
  }

  /**
   * What Swagger UI renders deep inside components that take no option for it, mended as it appears:
   * - code blocks (examples, responses, curl) scroll when wide or tall, so they take the keyboard focus and can be
   *   scrolled without a mouse;
   * - a schema without a title (an operation's inline request body) has a disclosure button with only an arrow in
   *   it: it is named "Schema";
   * - the server picker sits in an empty label: it is named by the "Servers" title shown beside it.
   */
  function mendRenderedMarkup(root) {
    const mend = () => {
      for (const pre of root.querySelectorAll('pre:not([tabindex])')) pre.setAttribute('tabindex', '0');
      for (const button of root.querySelectorAll('button.json-schema-2020-12-accordion')) {
        if (button.textContent.trim()) button.removeAttribute('aria-label');
        else if (!button.hasAttribute('aria-label')) button.setAttribute('aria-label', 'Schema');
      }
      const servers = root.querySelector('select#servers:not([aria-labelledby])');
      const title = root.querySelector('.servers-title');
      if (servers && title) {
        title.id = 'docs-servers-title';
        servers.setAttribute('aria-labelledby', title.id);
      }
    };
    new MutationObserver(mend).observe(root, { childList: true, subtree: true });
    mend();
  }
})();
