// Hash routes (#/cluster, #/node/<id>, #/instances, #/traces,
// #/traces/<id>, #/chat): the agent serves one index.html, and the
// desktop window can be pointed at any page by setting the hash.
class Router {
  path = $state(location.hash.slice(1) || '/cluster');
  constructor() {
    window.addEventListener('hashchange', () => (this.path = location.hash.slice(1) || '/cluster'));
  }
  get parts(): string[] {
    return this.path.split('?')[0].split('/').filter(Boolean).map(decodeURIComponent);
  }
}

export const router = new Router();
