/**
 * The "Inside the model" module's value-vector search, without LIT or a DOM: the query and ranking, the search on
 * `_<group>_inside_search` and its polls while the value index is built (../shared/jobs.ts `poll`). The class the
 * module's controller (controller.ts) extends; the group searched is the traced token's, else the server's first.
 */
import {LIMIT_FIELD, QUERY_FIELD, RANKING_FIELD, SEARCH_FIELD} from '../shared/fields.js';
import {poll, type ServerHost} from '../shared/jobs.js';
import {errorMessage, type IndexedInputLike} from '../shared/request.js';
import {hashString, insideModels, shouldPoll} from './logic.js';
import {parseSearch, type SearchPayload, type SearchRanking} from './payload.js';

export const SEARCH_LIMIT = 30;
/** How often the search asks again while the value index is built. */
export const SEARCH_POLL_MS = 1500;

/** What the search needs from LIT and the element. */
export interface SearchHost extends ServerHost {
  /** Whether the element is in the page (a search poll stops when it is not). */
  isConnected(): boolean;
}

export abstract class ValueSearch<H extends SearchHost = SearchHost> {
  query = '';
  searchRanking: SearchRanking = 'top_k';
  search: SearchPayload | null = null;
  searchError = '';
  searching = false;

  private searchSeq = 0;

  constructor(protected readonly host: H) {}

  /** The model group of the token traced, if any. */
  protected abstract tracedGroup(): string | undefined;

  /** Ends the search's polls. */
  protected stopSearch() {
    this.searchSeq++;
  }

  setQuery(query: string) {
    this.query = query;
    this.host.changed();
  }

  setRanking(ranking: SearchRanking) {
    this.searchRanking = ranking;
    this.host.changed();
    if (this.query.trim()) void this.runSearch();
  }

  /**
   * Searches value vectors by the query's token; asks again while the index is built (../shared/jobs.ts `poll`).
   * Resolves once the first answer is shown (the later asks go on meanwhile).
   */
  async runSearch() {
    if (this.searchArgs() === null) return;
    const seq = ++this.searchSeq;
    this.searchError = '';
    let answered!: () => void;
    const first = new Promise<void>((resolve) => { answered = resolve; });
    void poll<SearchPayload | null>({
      wait: (n) => n === 1 ? 0 : SEARCH_POLL_MS,
      // A newer search (or none to run: no query, no model group) ends the older one's polls.
      wanted: (n) => n === 1 || (seq === this.searchSeq && this.searchArgs() !== null),
      read: async (n) => {
        const {query, group} = this.searchArgs()!;
        this.searching = true;
        this.host.changed();
        const id = `inside-search-${hashString(query)}-${this.searchRanking}-${n - 1}-${seq}`;
        const input: IndexedInputLike = {id, data: {[QUERY_FIELD]: query, [LIMIT_FIELD]: SEARCH_LIMIT,
                                                    [RANKING_FIELD]: this.searchRanking, _id: id},
                                         meta: {added: true}};
        const res = await this.host.getPreds([input], insideModels(group).search, [SEARCH_FIELD],
                                             'Searching value vectors…');
        return seq === this.searchSeq ? parseSearch(res[0]?.[SEARCH_FIELD]) : null;
      },
      failed: (e) => {
        if (seq !== this.searchSeq) return;
        this.searching = false;
        this.searchError = errorMessage(e);
        this.host.changed();
      },
      take: (search) => {
        answered();
        if (seq !== this.searchSeq) return false;
        this.search = search;
        this.searching = false;
        this.host.changed();
        return shouldPoll(this.search) && this.host.isConnected();
      },
    }).finally(answered);
    await first;
  }

  /** The query (trimmed) and the model group to search, or null when either is missing. */
  private searchArgs(): {query: string; group: string} | null {
    const query = this.query.trim();
    const group = this.tracedGroup() ?? this.groupFromModels();
    return !query || group === null ? null : {query, group};
  }

  /** A model group for searching before any target is selected. */
  private groupFromModels(): string | null {
    const names = Object.keys(this.host.models());
    const m = names.map((n) => /^_(.+)_inside_search$/.exec(n)).find((x) => x !== null);
    return m ? m[1] : null;
  }
}
